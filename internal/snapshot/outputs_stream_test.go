package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readBackStream reads a whole snapshot stream back into the files it holds
// (digests computed here, sorted by path) and their content by path.
func readBackStream(t *testing.T, b []byte) ([]File, map[string]string) {
	t.Helper()
	sr := NewStreamReader(bytes.NewReader(b), StreamLimits{})
	var files []File
	content := map[string]string{}
	for {
		f, r, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream WriteStream wrote does not read back: %v", err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		f.Digest = hex.EncodeToString(sum[:])
		files = append(files, f)
		content[f.Path] = string(data)
	}
	m := &Manifest{Files: files}
	if m.Files == nil {
		m.Files = []File{}
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the stream's files: %v", err)
	}
	return m.Files, content
}

// streamPlan writes the plan as a stream into memory and reads it back.
func streamPlan(t *testing.T, p *OutputPlan) (OutputSent, []File, map[string]string) {
	t.Helper()
	var b bytes.Buffer
	sent, err := p.WriteStream(&b, nil)
	if err != nil {
		t.Fatalf("WriteStream: %v", err)
	}
	files, content := readBackStream(t, b.Bytes())
	return sent, files, content
}

// TestWriteStreamMatchesBuildOutputs plans and streams a tree with every
// kind of entry BuildOutputs skips (unsafe and dangling links, a loop, bad
// names, a FIFO, a file over the size limit, files over the quota) and
// checks that the stream holds exactly the files of BuildOutputs' manifest,
// with the same content, and that the skipped entries are the same, in the
// same order.
func TestWriteStreamMatchesBuildOutputs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "outputs")
	writeTree(t, out, map[string]string{
		"normal.txt":    "hello\n",
		"sub/data.csv":  "1,2\n",
		"empty":         "",
		`back\slash`:    "b",
		"bad\xffname":   "u",
		"bad\xffdir/in": "u",
		"huge.bin":      strings.Repeat("h", 5000),  // over MaxFileSize
		"big1.bin":      strings.Repeat("1", 900),   // the largest under it: over the quota
		"big2.bin":      strings.Repeat("2", 800),   // next: over the quota
		"mid.bin":       strings.Repeat("m", 300),   // kept
		"whole.bin":     strings.Repeat("w", 2<<20), // past readWhole, sent as it is read
		"x/y/z.txt":     "deep",
	})
	many := map[string]string{}
	for i := range 3*runFiles + 7 { // several runs read ahead
		many[fmt.Sprintf("many/f%04d", i)] = strings.Repeat("m", i%50)
	}
	writeTree(t, out, many)
	writeTree(t, dir, map[string]string{"secret": "s"})
	for link, target := range map[string]string{
		"escape":    "../secret",
		"etc":       "/etc/passwd",
		"dangling":  "missing.txt",
		"inside":    "normal.txt",
		"insidedir": "sub",
		"loop/up":   "..",
	} {
		p := filepath.Join(out, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []OutputOptions{
		{},
		{MaxFileSize: 4000},
		{MaxFileSize: 3 << 20, MaxSize: 2<<20 + 400, SizeLimitName: "the job's output quota"},
		{MaxSize: -1},
	} {
		ob, err := BuildOutputs(out, opt)
		if err != nil {
			t.Fatal(err)
		}
		p, err := PlanOutputs(out, opt)
		if err != nil {
			t.Fatal(err)
		}
		sent, files, content := streamPlan(t, p)
		if d := cmp.Diff(ob.Skipped, sent.Skipped); d != "" {
			t.Errorf("%+v: skipped (-BuildOutputs +WriteStream):\n%s", opt, d)
		}
		if d := cmp.Diff(ob.Manifest.Files, files); d != "" {
			t.Errorf("%+v: files (-BuildOutputs +stream):\n%s", opt, d)
		}
		if sent.Files != len(ob.Manifest.Files) || sent.Bytes != ob.Manifest.TotalSize() || p.TotalSize() != sent.Bytes || p.Len() != sent.Files {
			t.Errorf("%+v: sent %d files of %d bytes, plan %d of %d; want %d of %d", opt, sent.Files, sent.Bytes, p.Len(), p.TotalSize(), len(ob.Manifest.Files), ob.Manifest.TotalSize())
		}
		for _, f := range ob.Manifest.Files {
			want, err := os.ReadFile(ob.Files[f.Digest])
			if err != nil {
				t.Fatal(err)
			}
			if content[f.Path] != string(want) {
				t.Errorf("%+v: %s: the stream holds %d bytes that differ from the file's %d", opt, f.Path, len(content[f.Path]), len(want))
			}
		}
	}
}

// TestWriteStreamFilesChangedAfterThePlan changes files between the walk
// and the read: a file that shrank (small or past readWhole), or was
// swapped for a symlink, a FIFO or a directory is left out with a reason,
// one that grew is sent cut to the size the walk found, and the stream
// stays valid (every record carries exactly the size it declares). The
// FIFO must not block the read.
func TestWriteStreamFilesChangedAfterThePlan(t *testing.T) {
	out := t.TempDir()
	writeTree(t, out, map[string]string{
		"keep.txt":    "unchanged\n",
		"shrunk.txt":  "0123456789",
		"grown.txt":   "start",
		"bigshrunk":   strings.Repeat("b", readWhole+10),
		"biggrown":    strings.Repeat("g", readWhole+10),
		"tolink.txt":  "x",
		"tofifo.txt":  "x",
		"todir.txt":   "x",
		"gone.txt":    "x",
		"emptied.txt": "x",
	})
	p, err := PlanOutputs(out, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "shrunk.txt"), []byte("0123"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "emptied.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "grown.txt"), []byte("start and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "bigshrunk"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "biggrown"), []byte(strings.Repeat("g", readWhole+10)+"more"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tolink.txt", "tofifo.txt", "todir.txt", "gone.txt"} {
		if err := os.Remove(filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("keep.txt", filepath.Join(out, "tolink.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(out, "tofifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(out, "todir.txt"), 0o755); err != nil {
		t.Fatal(err)
	}

	sent, files, content := streamPlan(t, p)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if d := cmp.Diff([]string{"biggrown", "grown.txt", "keep.txt"}, paths); d != "" {
		t.Errorf("files sent (-want +got):\n%s", d)
	}
	if content["grown.txt"] != "start" || content["biggrown"] != strings.Repeat("g", readWhole+10) || content["keep.txt"] != "unchanged\n" {
		t.Errorf("content: grown.txt %q, biggrown %d bytes, keep.txt %q; want the sizes the walk found", content["grown.txt"], len(content["biggrown"]), content["keep.txt"])
	}
	want := map[string]string{
		"shrunk.txt":  shrankWhy(10, 4),
		"emptied.txt": shrankWhy(1, 0),
		"bigshrunk":   shrankWhy(readWhole+10, 1),
		"tolink.txt":  "cannot be read: too many levels of symbolic links",
		"tofifo.txt":  shrankWhy(1, 0),
		"todir.txt":   "cannot be read: is a directory",
		"gone.txt":    "cannot be read: no such file or directory",
	}
	got := map[string]string{}
	for _, s := range sent.Skipped {
		got[s.Path] = s.Reason
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
	if sent.Files != 3 || sent.Bytes != int64(len("start")+readWhole+10+len("unchanged\n")) {
		t.Errorf("sent %d files of %d bytes", sent.Files, sent.Bytes)
	}
	// The plan is not changed by what the read found: a second stream
	// reads the files again.
	if p.Len() != 10 {
		t.Errorf("the plan holds %d files after the stream, want 10", p.Len())
	}
}

// TestWriteStreamListsAtMostMaxSkippedListed: skips found while reading
// count toward the same limit as the walk's.
func TestWriteStreamListsAtMostMaxSkippedListed(t *testing.T) {
	out := t.TempDir()
	files := map[string]string{}
	for i := range MaxSkippedListed + 5 {
		files["f"+strings.Repeat("0", 4)+string(rune('a'+i%26))+"/"+filepath.Base(t.Name())+itoa(i)] = "x"
	}
	writeTree(t, out, files)
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := PlanOutputs(out, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if err := os.Remove(filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	sent, got, _ := streamPlan(t, p)
	if len(got) != 0 || len(sent.Skipped) != MaxSkippedListed || sent.SkippedMore != 6 || sent.Skipped[0].Path != "fifo" {
		t.Errorf("sent %d files, %d skipped listed (first %+v), %d more; want none, %d, the FIFO first, 6 more", len(got), len(sent.Skipped), sent.Skipped[0], sent.SkippedMore, MaxSkippedListed)
	}
}

func itoa(i int) string {
	return string(rune('0'+i/1000%10)) + string(rune('0'+i/100%10)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

// failAfter is a writer that fails once it got n bytes.
type failAfter struct{ n int }

var errWriter = errors.New("the connection broke")

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errWriter
	}
	w.n -= len(p)
	return len(p), nil
}

// A writer that fails stops the stream with its error, while runs are
// still being read ahead (WriteStream must not hang on them).
func TestWriteStreamStopsOnAWriteError(t *testing.T) {
	out := t.TempDir()
	files := map[string]string{}
	for i := range runFiles * (runsAhead + 4) {
		files[fmt.Sprintf("f%05d", i)] = strings.Repeat("x", 1000)
	}
	writeTree(t, out, files)
	p, err := PlanOutputs(out, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteStream(&failAfter{n: 300 << 10}, nil); !errors.Is(err, errWriter) {
		t.Fatalf("WriteStream = %v, want the writer's error", err)
	}
}
