package serverurl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The file is written whole (no temporary file left beside it), readable
// by every account that reaches it and written by its owner only, and
// read back without its newline or a trailing slash.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "http://127.0.0.1:8581/"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("the file's mode is %v, want 0644", fi.Mode().Perm())
	}
	if err := Write(dir, "http://127.0.0.1:9000"); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != FileName {
		t.Errorf("the folder holds %v, want %s alone", ents, FileName)
	}
	got, err := Read(path)
	if err != nil || got != "http://127.0.0.1:9000" {
		t.Errorf("Read = %q, %v; want http://127.0.0.1:9000", got, err)
	}
}

// What is not a server URL is neither written nor taken from the file.
func TestNotAURL(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"", "127.0.0.1:8581", "ftp://host", "http://"} {
		if err := Write(dir, bad); err == nil {
			t.Errorf("Write(%q) took it", bad)
		}
		path := filepath.Join(dir, "bad")
		if err := os.WriteFile(path, []byte(bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(path); err == nil || !strings.Contains(err.Error(), "is not a server URL") {
			t.Errorf("Read of %q = %q, %v; want an error saying it is not a server URL", bad, got, err)
		}
	}
}

// A URL follows its file only when Reread is called; each change is told
// once, however many callers find it at the same time; a missing file
// changes nothing and is not reported, a bad one is reported once.
func TestReread(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var moves []string
	var bad []error
	u := New("http://127.0.0.1:1/", filepath.Join(dir, FileName))
	u.Moved = func(from, to string) {
		mu.Lock()
		moves = append(moves, from+" -> "+to)
		mu.Unlock()
	}
	u.BadFile = func(err error) {
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}
	if u.Reread() || u.Get() != "http://127.0.0.1:1" {
		t.Fatalf("without a file the URL is %s", u.Get())
	}

	if err := Write(dir, "http://127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if u.Get() != "http://127.0.0.1:1" {
		t.Errorf("the URL changed before a reread: %s", u.Get())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { u.Reread() })
	}
	wg.Wait()
	if u.Get() != "http://127.0.0.1:2" {
		t.Errorf("after a reread the URL is %s, want http://127.0.0.1:2", u.Get())
	}
	if u.Reread() {
		t.Error("a reread of the same file said the URL changed")
	}

	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("not a url\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u.Reread()
	u.Reread()
	if u.Get() != "http://127.0.0.1:2" {
		t.Errorf("a bad file changed the URL to %s", u.Get())
	}
	if err := Write(dir, "http://127.0.0.1:3"); err != nil {
		t.Fatal(err)
	}
	if !u.Reread() {
		t.Error("the reread of a good file after a bad one changed nothing")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	u.Reread()

	mu.Lock()
	defer mu.Unlock()
	want := []string{"http://127.0.0.1:1 -> http://127.0.0.1:2", "http://127.0.0.1:2 -> http://127.0.0.1:3"}
	if strings.Join(moves, "\n") != strings.Join(want, "\n") {
		t.Errorf("moves told:\n%s\nwant:\n%s", strings.Join(moves, "\n"), strings.Join(want, "\n"))
	}
	if len(bad) != 1 || errors.Is(bad[0], os.ErrNotExist) {
		t.Errorf("bad files told: %v; want the one that held no URL, once", bad)
	}
}
