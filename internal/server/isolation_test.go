package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/isolation"
)

func TestPrivateDataDirTightensWhatWasThere(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{"ferry.db": 0o644, "ferry.db-wal": 0o644, "ferry.db-shm": 0o666, TokenFile: 0o640, "ferry-run": 0o755, KeyFile: 0o600}
	for name, mode := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := privateDataDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %04o, want 0700", fi.Mode().Perm())
	}
	want := map[string]os.FileMode{"ferry.db": 0o600, "ferry.db-wal": 0o600, "ferry.db-shm": 0o600, TokenFile: 0o600, "ferry-run": 0o700, KeyFile: 0o600}
	for name, mode := range want {
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != mode {
			t.Errorf("%s mode %04o, want %04o", name, fi.Mode().Perm(), mode)
		}
	}
}

func TestWorkDirIsOutsideTheDataDir(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, bad := range []string{data, filepath.Join(data, "work"), filepath.Dir(data)} {
		if _, err := workDir(data, bad, nil); err == nil || !strings.Contains(err.Error(), "outside the data dir") {
			t.Errorf("workDir(%s): %v, want it refused", bad, err)
		}
	}
	got, err := workDir(data, "", nil)
	if err != nil || got != data+"-work" {
		t.Errorf("default work dir = %q, %v; want %s", got, err, data+"-work")
	}
	if fi, err := os.Stat(got); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("work dir of jobs run as the server's user: %v %v, want mode 0700", fi, err)
	}
}

// When jobs run as another user, the work dir is passable by it: beside
// the data dir when that user can get there, else under sharedWorkRoot;
// a --work-dir it cannot reach is refused with a way out.
func TestWorkDirForAnotherUser(t *testing.T) {
	other := &isolation.User{Name: "other", UID: 54321, GID: 54321}
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil { // other cannot pass
		t.Fatal(err)
	}
	data := filepath.Join(private, "data")
	if got := defaultWorkDir(data, other); !strings.HasPrefix(got, sharedWorkRoot+"/") {
		t.Errorf("default work dir behind a 0700 directory = %s, want one under %s", got, sharedWorkRoot)
	}
	if _, err := workDir(data, filepath.Join(private, "work"), other); err == nil || !strings.Contains(err.Error(), "cannot be passed through by other") {
		t.Errorf("an unreachable --work-dir: %v", err)
	}
	open := t.TempDir()
	for _, d := range []string{open, filepath.Dir(open)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data = filepath.Join(open, "data")
	// A work dir left 0700 by a server that ran jobs as itself is reused.
	if err := os.Mkdir(data+"-work", 0o700); err != nil {
		t.Fatal(err)
	}
	if got := defaultWorkDir(data, other); got != data+"-work" {
		t.Errorf("default work dir beside a reachable data dir = %s, want %s", got, data+"-work")
	}
	got, err := workDir(data, "", other)
	if err != nil {
		t.Fatal(err)
	}
	// nodes/ made by a server that ran jobs as itself is opened up too.
	if err := os.Chmod(filepath.Join(got, "nodes"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := workDir(data, "", other); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{got, filepath.Join(got, "nodes")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o711 {
			t.Errorf("%s, of jobs run as another user: %v %v, want mode 0711", d, fi, err)
		}
	}
}
