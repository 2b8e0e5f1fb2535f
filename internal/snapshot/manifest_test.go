package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/blob"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func file(p string) File {
	return File{Path: p, Mode: 0o644, Size: int64(len(p)), Digest: sum(p)}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a/", MaxPathLen/2) + "b"
	tests := []struct {
		name    string
		files   []File
		unsafe  bool   // wraps ErrUnsafePath
		mention string // the message names this
	}{
		{name: "ok", files: []File{file("a"), file("b/c"), file("b/d/e"), file(".hidden"), file("a b/ünï")}},
		{name: "empty manifest", files: nil},
		{name: "dotdot", files: []File{file("..")}, unsafe: true, mention: `".."`},
		{name: "dotdot prefix", files: []File{file("../x")}, unsafe: true, mention: `"../x"`},
		{name: "dotdot inside", files: []File{file("a/../b")}, unsafe: true, mention: `"a/../b"`},
		{name: "dotdot suffix", files: []File{file("a/..")}, unsafe: true, mention: `"a/.."`},
		{name: "dot", files: []File{file(".")}, unsafe: true},
		{name: "dot component", files: []File{file("./a")}, unsafe: true, mention: `"./a"`},
		{name: "absolute", files: []File{file("/etc/passwd")}, unsafe: true, mention: "absolute"},
		{name: "empty path", files: []File{file("")}, unsafe: true, mention: "empty"},
		{name: "double slash", files: []File{file("a//b")}, unsafe: true},
		{name: "trailing slash", files: []File{file("a/")}, unsafe: true},
		{name: "backslash", files: []File{file(`a\b`)}, unsafe: true, mention: "backslash"},
		{name: "backslash dotdot", files: []File{file(`..\x`)}, unsafe: true},
		{name: "nul", files: []File{file("a\x00b")}, unsafe: true, mention: "NUL"},
		{name: "bad utf8", files: []File{file("a\xffb")}, unsafe: true, mention: "UTF-8"},
		{name: "too long", files: []File{file(long)}, unsafe: true, mention: "limit"},
		{name: "duplicate", files: []File{file("a"), file("b"), file("a")}, unsafe: true, mention: `"a": listed more than once`},
		{name: "file and dir", files: []File{file("a/b/c"), file("a/b")}, unsafe: true, mention: `"a/b": is a file and also the directory of "a/b/c"`},
		{name: "bad digest", files: []File{{Path: "x", Mode: 0o644, Digest: "abc"}}, mention: `"x"`},
		{name: "uppercase digest", files: []File{{Path: "x", Mode: 0o644, Digest: strings.ToUpper(sum("x"))}}, mention: `"x"`},
		{name: "negative size", files: []File{{Path: "x", Mode: 0o644, Size: -1, Digest: sum("x")}}, mention: "negative"},
		{name: "setuid", files: []File{{Path: "x", Mode: 0o4755, Digest: sum("x")}}, mention: "0o777"},
		{name: "dir bit", files: []File{{Path: "x", Mode: 1 << 31, Digest: sum("x")}}, mention: `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Manifest{Files: tt.files}).Validate()
			if tt.mention == "" && !tt.unsafe {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			if !errors.Is(err, ErrInvalidManifest) {
				t.Errorf("err %v does not wrap ErrInvalidManifest", err)
			}
			if got := errors.Is(err, ErrUnsafePath); got != tt.unsafe {
				t.Errorf("errors.Is(err, ErrUnsafePath) = %v, want %v (err: %v)", got, tt.unsafe, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("err %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestValidateBadDigestWrapsBlobSentinel(t *testing.T) {
	err := (&Manifest{Files: []File{{Path: "x", Digest: "../../etc"}}}).Validate()
	if !errors.Is(err, blob.ErrInvalidDigest) {
		t.Errorf("err = %v, want blob.ErrInvalidDigest", err)
	}
}

func TestValidateTooManyFiles(t *testing.T) {
	files := make([]File, MaxFiles+1)
	err := (&Manifest{Files: files}).Validate()
	if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), "1000001 files") {
		t.Errorf("err = %v", err)
	}
}

func TestIDIsOrderIndependent(t *testing.T) {
	a := &Manifest{Files: []File{file("a"), file("b/c"), file("b.d")}}
	b := &Manifest{Files: []File{file("b.d"), file("b/c"), file("a")}}
	if a.ID() != b.ID() {
		t.Error("same files in another order give another ID")
	}
	if (&Manifest{}).ID() != (&Manifest{Files: []File{}}).ID() {
		t.Error("nil and empty file lists give different IDs")
	}
	c := &Manifest{Files: []File{file("a"), file("b/c"), file("b.d")}}
	c.Files[0].Mode = 0o755
	if c.ID() == a.ID() {
		t.Error("a mode change keeps the ID")
	}
	// ID must not sort the caller's slice.
	if b.Files[0].Path != "b.d" {
		t.Error("ID reordered the manifest")
	}
}

func TestParseManifest(t *testing.T) {
	want := &Manifest{Files: []File{file("a"), file("z/y")}}
	data, err := json.Marshal(Manifest{Files: []File{file("z/y"), file("a")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseManifest (-want +got):\n%s", diff)
	}
	if got.ID() != want.ID() {
		t.Error("ID changed across a round trip")
	}
	again, err := ParseManifest(got.MarshalCanonical())
	if err != nil || again.ID() != want.ID() {
		t.Errorf("canonical round trip: %v", err)
	}
	d := sum("x")
	bad := []string{
		``,
		`null`,
		`{}`,
		`{"files":null}`,
		`[]`,
		`{"files":[]} {"files":[]}`,
		`{"files":[], "extra":1}`,
		`{"files":[{"path":"x","mode":420,"size":1,"sha256":"` + d + `","owner":"root"}]}`,
		`{"files":[{"path":"../x","mode":420,"size":1,"sha256":"` + d + `"}]}`,
		`{"files":[{"path":"x","mode":-1,"size":1,"sha256":"` + d + `"}]}`,
		`{"files":[{"path":"x","mode":420,"size":1.5,"sha256":"` + d + `"}]}`,
	}
	for _, b := range bad {
		if _, err := ParseManifest([]byte(b)); !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("ParseManifest(%s) err = %v, want ErrInvalidManifest", b, err)
		}
	}
	if m, err := ParseManifest([]byte(`{"files":[]}`)); err != nil || len(m.Files) != 0 {
		t.Errorf("empty manifest: %v, %v", m, err)
	}
}

func TestTotalSizeAndDigests(t *testing.T) {
	m := &Manifest{Files: []File{
		{Path: "a", Size: 3, Digest: sum("abc")},
		{Path: "b", Size: 3, Digest: sum("abc")},
		{Path: "c", Size: 1, Digest: sum("x")},
	}}
	if got := m.TotalSize(); got != 7 {
		t.Errorf("TotalSize = %d, want 7", got)
	}
	want := []string{sum("abc"), sum("x")}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if diff := cmp.Diff(want, m.Digests()); diff != "" {
		t.Errorf("Digests (-want +got):\n%s", diff)
	}
}

func TestDiff(t *testing.T) {
	old := &Manifest{Files: []File{file("keep"), file("gone"), file("edit"), file("chmod")}}
	edited := file("edit")
	edited.Digest = sum("new")
	chmod := file("chmod")
	chmod.Mode = 0o755
	nw := &Manifest{Files: []File{file("new"), file("keep"), edited, chmod}}
	added, removed, changed := Diff(old, nw)
	if diff := cmp.Diff([]string{"new"}, added); diff != "" {
		t.Errorf("added (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gone"}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"chmod", "edit"}, changed); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB", 1 << 62: "4.0 EiB",
	} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
