package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// streamFile is one record of a test stream.
type streamFile struct {
	File
	Content string
}

// writeStream writes files with StreamWriter.
func writeStream(t testing.TB, files ...streamFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	sw := NewStreamWriter(&buf)
	for i, f := range files {
		var err error
		if i%2 == 0 {
			err = sw.WriteData(f.File, []byte(f.Content))
		} else {
			f.Size = int64(len(f.Content))
			err = sw.WriteFrom(f.File, strings.NewReader(f.Content))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawRecord writes one record by hand, so that tests can send what
// StreamWriter refuses to write.
func rawRecord(path string, mode, size uint64, content string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(path)))
	b = append(b, path...)
	b = binary.AppendUvarint(b, mode)
	b = binary.AppendUvarint(b, size)
	return append(b, content...)
}

func rawStream(records ...[]byte) []byte {
	b := []byte(StreamMagic)
	for _, r := range records {
		b = append(b, r...)
	}
	return append(b, 0)
}

// readStream reads a whole stream, returning its files with their content
// or the first error.
func readStream(data []byte, lim StreamLimits) ([]streamFile, error) {
	sr := NewStreamReader(bytes.NewReader(data), lim)
	var got []streamFile
	for {
		f, body, err := sr.Next()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		c, err := io.ReadAll(body)
		if err != nil {
			return got, err
		}
		got = append(got, streamFile{File: f, Content: string(c)})
	}
}

func TestStreamRoundTrip(t *testing.T) {
	files := []streamFile{
		{File{Path: "b/run.sh", Mode: 0o755}, "#!/bin/sh\n"},
		{File{Path: "a.txt", Mode: 0o644}, "hello"},
		{File{Path: "empty", Mode: 0o644}, ""},
		{File{Path: "ünïcode/x", Mode: 0o600}, strings.Repeat("x", 300<<10)},
	}
	got, err := readStream(writeStream(t, files...), StreamLimits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		files[i].Size = int64(len(files[i].Content))
	}
	if d := cmp.Diff(files, got); d != "" {
		t.Errorf("read back (-sent +got):\n%s", d)
	}
	// An empty folder is a stream of no records.
	if got, err := readStream(writeStream(t), StreamLimits{}); err != nil || len(got) != 0 {
		t.Errorf("empty stream: %v, %v", got, err)
	}
}

// Content the caller does not read is skipped, so records stay framed.
func TestStreamSkipsUnreadContent(t *testing.T) {
	data := writeStream(t, streamFile{File{Path: "a", Mode: 0o644}, "aaaa"}, streamFile{File{Path: "b", Mode: 0o644}, "bb"})
	sr := NewStreamReader(bytes.NewReader(data), StreamLimits{})
	if _, _, err := sr.Next(); err != nil {
		t.Fatal(err)
	}
	f, body, err := sr.Next()
	if err != nil || f.Path != "b" {
		t.Fatalf("second record: %+v, %v", f, err)
	}
	if c, _ := io.ReadAll(body); string(c) != "bb" {
		t.Errorf("content %q, want bb", c)
	}
	if _, _, err := sr.Next(); err != io.EOF {
		t.Errorf("end: %v, want io.EOF", err)
	}
	if n, total := sr.Count(); n != 2 || total != 6 {
		t.Errorf("Count = %d, %d; want 2, 6", n, total)
	}
}

// Every strict prefix of a stream is refused as truncated, never taken for
// a whole one with fewer files.
func TestStreamTruncatedIsRefused(t *testing.T) {
	data := writeStream(t, streamFile{File{Path: "dir/a", Mode: 0o644}, "content"}, streamFile{File{Path: "b", Mode: 0o755}, strings.Repeat("z", 200)})
	for cut := range len(data) {
		_, err := readStream(data[:cut], StreamLimits{})
		if !errors.Is(err, ErrInvalidStream) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("stream cut at %d of %d bytes: err = %v, want a truncated stream", cut, len(data), err)
		}
	}
}

func TestStreamRefusesBadRecords(t *testing.T) {
	tests := []struct {
		name     string
		data     []byte
		lim      StreamLimits
		want     error
		contains string
	}{
		{"bad magic", append([]byte("FRYSNAP\x02"), 0), StreamLimits{}, ErrInvalidStream, "does not begin with"},
		{"a tar stream", append(make([]byte, 512), 0), StreamLimits{}, ErrInvalidStream, "does not begin with"},
		{"dot dot", rawStream(rawRecord("../etc/passwd", 0o644, 1, "x")), StreamLimits{}, ErrUnsafePath, `record 1: unsafe path "../etc/passwd"`},
		{"absolute", rawStream(rawRecord("/etc/passwd", 0o644, 1, "x")), StreamLimits{}, ErrUnsafePath, "is absolute"},
		{"inner dot dot", rawStream(rawRecord("a/../../b", 0o644, 0, "")), StreamLimits{}, ErrUnsafePath, `".." component`},
		{"not utf-8", rawStream(rawRecord("bad\xffname", 0o644, 0, "")), StreamLimits{}, ErrUnsafePath, "not valid UTF-8"},
		{"nul", rawStream(rawRecord("a\x00b", 0o644, 0, "")), StreamLimits{}, ErrUnsafePath, "NUL"},
		{"backslash", rawStream(rawRecord(`a\..\b`, 0o644, 0, "")), StreamLimits{}, ErrUnsafePath, "backslash"},
		{"duplicate", rawStream(rawRecord("a", 0o644, 1, "x"), rawRecord("a", 0o644, 1, "y")), StreamLimits{}, ErrUnsafePath, `record 2: unsafe path "a": sent more than once`},
		{"file and directory", rawStream(rawRecord("a/b", 0o644, 1, "x"), rawRecord("a", 0o644, 1, "y")), StreamLimits{}, ErrUnsafePath, "is a file and also the directory"},
		{"mode bits", rawStream(rawRecord("a", 0o4755, 0, "")), StreamLimits{}, ErrInvalidStream, "mode"},
		{"long path", rawStream(rawRecord(strings.Repeat("a", MaxPathLen+1), 0o644, 0, "")), StreamLimits{}, ErrInvalidStream, "over the limit"},
		{"file over the limit", rawStream(rawRecord("big", 0o644, 11, strings.Repeat("x", 11))), StreamLimits{MaxFileSize: 10}, ErrTooLarge, `record 1 "big": 11 bytes, over the limit of 10`},
		{"total over the limit", rawStream(rawRecord("a", 0o644, 6, "xxxxxx"), rawRecord("b", 0o644, 6, "yyyyyy")), StreamLimits{MaxTotalSize: 10}, ErrTooLarge, `record 2 "b"`},
		{"huge size", rawStream(rawRecord("a", 0o644, 1<<62, "")), StreamLimits{}, ErrInvalidStream, "truncated"},
		{"too many files", rawStream(rawRecord("a", 0o644, 0, ""), rawRecord("b", 0o644, 0, "")), StreamLimits{MaxFiles: 1}, ErrTooLarge, "more than 1 files"},
		{"size overflows", append([]byte(StreamMagic+"\x01a\x00"), bytes.Repeat([]byte{0xff}, 10)...), StreamLimits{}, ErrInvalidStream, "out of range"},
		{"data after the end", append(rawStream(rawRecord("a", 0o644, 0, "")), 'x'), StreamLimits{}, ErrInvalidStream, "data follows the end"},
		{"content short of its size", append([]byte(StreamMagic), rawRecord("a", 0o644, 5, "abc")...), StreamLimits{}, ErrInvalidStream, `record 1 "a": the stream ends 2 bytes before`},
	}
	var long [][]byte
	for i := range MaxStreamPathBytes/MaxPathLen + 1 {
		long = append(long, rawRecord(fmt.Sprintf("%0*d", MaxPathLen, i), 0o644, 0, ""))
	}
	tests = append(tests, struct {
		name     string
		data     []byte
		lim      StreamLimits
		want     error
		contains string
	}{"paths over their limit", rawStream(long...), StreamLimits{}, ErrTooLarge, "the paths pass"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readStream(tt.data, tt.lim)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("err = %v, want %v containing %q", err, tt.want, tt.contains)
			}
		})
	}
}

// A read error of the underlying reader is passed on in the chain, not
// taken for a bad stream.
func TestStreamPassesOnReadErrors(t *testing.T) {
	cause := errors.New("connection reset")
	data := writeStream(t, streamFile{File{Path: "a", Mode: 0o644}, "content"})
	r := io.MultiReader(bytes.NewReader(data[:len(data)-3]), iotestErr{cause})
	sr := NewStreamReader(r, StreamLimits{})
	_, body, err := sr.Next()
	if err == nil {
		_, err = io.ReadAll(body)
	}
	if !errors.Is(err, cause) || errors.Is(err, ErrInvalidStream) {
		t.Errorf("err = %v, want the reader's error", err)
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

func TestStreamWriterRefusesWhatTheReaderWould(t *testing.T) {
	sw := NewStreamWriter(io.Discard)
	if err := sw.WriteData(File{Path: "../x", Mode: 0o644}, nil); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("../x: %v, want ErrUnsafePath", err)
	}
	if err := sw.WriteFrom(File{Path: "short", Mode: 0o644, Size: 10}, strings.NewReader("abc")); err == nil || !strings.Contains(err.Error(), "3 bytes read of 10") {
		t.Errorf("a reader shorter than its size: %v", err)
	}
}

// FuzzStreamReader checks that the reader never panics on any input, and
// that what it accepts is a valid snapshot: confined paths, no duplicates,
// content of exactly the declared sizes.
func FuzzStreamReader(f *testing.F) {
	f.Add(writeStream(f, streamFile{File{Path: "a/b", Mode: 0o644}, "x"}, streamFile{File{Path: "c", Mode: 0o755}, ""}))
	f.Add(rawStream(rawRecord("../x", 0o644, 1, "x")))
	f.Add(rawStream(rawRecord("a", 0o644, 1, "x"), rawRecord("a/b", 0o644, 1, "y")))
	f.Add(rawStream(rawRecord("a", 0o644, 3, "x")))
	f.Add([]byte(StreamMagic))
	f.Add([]byte("FRYSNAP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sr := NewStreamReader(bytes.NewReader(data), StreamLimits{MaxFileSize: 1 << 20, MaxTotalSize: 4 << 20, MaxFiles: 1000})
		m := &Manifest{Files: []File{}}
		for {
			file, body, err := sr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
			n, err := io.Copy(io.Discard, body)
			if err != nil {
				return
			}
			if n != file.Size {
				t.Fatalf("%q: read %d bytes, declared %d", file.Path, n, file.Size)
			}
			if !filepath.IsLocal(filepath.FromSlash(file.Path)) {
				t.Errorf("accepted non-local path %q", file.Path)
			}
			file.Digest = sum("")
			m.Files = append(m.Files, file)
		}
		if err := m.Validate(); err != nil {
			t.Errorf("accepted stream fails Validate: %v", err)
		}
	})
}
