package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
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
