package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

var fuzzSeeds = []string{
	`{"files":[]}`,
	`{"files":[{"path":"a","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"a/b/c","mode":493,"size":0,"sha256":"` + sum("") + `"},{"path":"a/d","mode":420,"size":3,"sha256":"` + sum("abc") + `"}]}`,
	`{"files":[{"path":"../x","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"/etc/passwd","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"a\\..\\..\\x","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"link/x","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"a","mode":420,"size":1,"sha256":"` + sum("a") + `"},{"path":"a/b","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
	`{"files":[{"path":"x","mode":4095,"size":-1,"sha256":"zz"}]}`,
	`{"files":[{"path":"a\u0000b","mode":420,"size":1,"sha256":"` + sum("a") + `"}]}`,
}

// FuzzParseManifest checks that ParseManifest never panics and that
// whatever it accepts is confined to its directory and stays valid.
func FuzzParseManifest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		for i, file := range m.Files {
			if !filepath.IsLocal(filepath.FromSlash(file.Path)) {
				t.Errorf("accepted non-local path %q", file.Path)
			}
			if i > 0 && m.Files[i-1].Path >= file.Path {
				t.Errorf("files not sorted and unique at %q", file.Path)
			}
		}
		if err := m.Validate(); err != nil {
			t.Errorf("accepted manifest fails re-validation: %v", err)
		}
		again, err := ParseManifest(m.MarshalCanonical())
		if err != nil {
			t.Fatalf("canonical form of an accepted manifest is refused: %v", err)
		}
		if again.ID() != m.ID() {
			t.Errorf("ID changed across a canonical round trip")
		}
		m.Digests()
		m.TotalSize()
	})
}

// FuzzExtract extracts fuzzed manifests with fuzzed content into a
// directory that has symlinks planted in it, and checks that nothing is
// written outside the destination.
func FuzzExtract(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), []byte("a"), "link")
	}
	f.Add([]byte(`{"files":[{"path":"up/x","mode":420,"size":1,"sha256":"`+sum("a")+`"}]}`), []byte("a"), "up")
	f.Fuzz(func(t *testing.T, data, content []byte, plant string) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		outside := filepath.Join(parent, "outside")
		for _, d := range []string{dest, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// Plant links to the outside, one under a fuzzed name, so that
		// manifest paths may run into them.
		for _, name := range []string{"link", plant} {
			if !filepath.IsLocal(name) || filepath.Base(name) != name {
				continue
			}
			os.Symlink(outside, filepath.Join(dest, name))
		}
		os.Symlink("..", filepath.Join(dest, "up"))

		h := sha256.Sum256(content)
		digest := hex.EncodeToString(h[:])
		open := func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(content)), nil
		}
		// As given: digests will almost never match the content.
		Extract(m, dest, open)
		// And rewritten so that every file matches and gets written.
		for i := range m.Files {
			m.Files[i].Digest, m.Files[i].Size = digest, int64(len(content))
		}
		Extract(m, dest, open)

		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) != 2 || names[0] != "dest" || names[1] != "outside" {
			t.Errorf("parent holds %v, want [dest outside]", names)
		}
		if inside, err := os.ReadDir(outside); err != nil || len(inside) != 0 {
			t.Errorf("outside holds %d entries (%v)", len(inside), err)
		}
	})
}

// FuzzBuildOutputs writes a file and a symlink with fuzzed names and a
// fuzzed link target into an output directory, and checks that
// BuildOutputs never fails on them, keeps only safe paths, and accounts for
// every entry: kept or listed as skipped with a printable path; and that
// the planned stream (PlanOutputs, WriteStream) holds the same files and
// skips the same entries.
func FuzzBuildOutputs(f *testing.F) {
	for _, s := range []struct{ name, link, target string }{
		{"normal.txt", "inside", "normal.txt"},
		{`back\slash`, "out", "../../etc/passwd"},
		{"bad\xffname", "dangling", "missing"},
		{"a\nb", "abs", "/"},
		{"x", "self", "."},
	} {
		f.Add(s.name, s.link, s.target)
	}
	f.Fuzz(func(t *testing.T, name, link, target string) {
		if name == link || !validEntryName(name) || !validEntryName(link) || strings.IndexByte(target, 0) >= 0 || target == "" {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			return // a name the file system refuses
		}
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			return
		}
		ob, err := BuildOutputs(dir, OutputOptions{})
		if err != nil {
			t.Fatalf("BuildOutputs: %v", err)
		}
		for _, file := range ob.Manifest.Files {
			if !filepath.IsLocal(filepath.FromSlash(file.Path)) || pathProblem(file.Path) != "" {
				t.Errorf("kept unsafe path %q", file.Path)
			}
		}
		for _, s := range ob.Skipped {
			if !utf8.ValidString(s.Path) || s.Reason == "" {
				t.Errorf("skipped entry %q: %q", s.Path, s.Reason)
			}
		}
		if len(ob.Manifest.Files) == 0 && len(ob.Skipped) == 0 {
			t.Errorf("neither kept nor skipped: %q", name)
		}
		// The planned stream the runner sends holds the same.
		plan, err := PlanOutputs(dir, OutputOptions{})
		if err != nil {
			t.Fatalf("PlanOutputs: %v", err)
		}
		var b bytes.Buffer
		sent, err := plan.WriteStream(&b, nil)
		if err != nil {
			t.Fatalf("WriteStream: %v", err)
		}
		files, _ := readBackStream(t, b.Bytes())
		if d := cmp.Diff(ob.Manifest.Files, files); d != "" {
			t.Errorf("stream (-BuildOutputs +stream):\n%s", d)
		}
		if d := cmp.Diff(ob.Skipped, sent.Skipped); d != "" {
			t.Errorf("skipped (-BuildOutputs +stream):\n%s", d)
		}
	})
}

// validEntryName reports whether s can name one entry of a directory.
func validEntryName(s string) bool {
	return s != "" && s != "." && s != ".." && s != ".git" && len(s) < 200 && !strings.ContainsAny(s, "/\x00")
}
