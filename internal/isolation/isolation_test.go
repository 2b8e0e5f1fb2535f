package isolation

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

func TestChoose(t *testing.T) {
	for _, c := range []struct {
		flag string
		euid int
		self string
		want string
		err  string
	}{
		{"", 0, "root", DefaultUser, ""},
		{"", 1000, "alice", "", ""},
		{"nobody", 0, "root", "nobody", ""},
		{"root", 0, "root", "", ""}, // root trusting its jobs, by name
		{"0", 0, "root", "", ""},    // or by uid
		{"alice", 1000, "alice", "", ""},
		{"nobody", 1000, "alice", "", "only a server running as root"},
	} {
		got, err := Choose(c.flag, c.euid, c.self)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Choose(%q, %d, %q) error = %v, want one saying %q", c.flag, c.euid, c.self, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Choose(%q, %d, %q) = %q, %v; want %q", c.flag, c.euid, c.self, got, err, c.want)
		}
	}
}

func TestPassable(t *testing.T) {
	job := &User{Name: "job", UID: 999, GID: 995}
	for _, c := range []struct {
		perm     fs.FileMode
		uid, gid uint32
		want     bool
	}{
		{0o700, 0, 0, false}, // root's private dir: the data dir
		{0o711, 0, 0, true},  // passable, not listable
		{0o755, 0, 0, true},
		{0o750, 0, 995, true},   // the job's group may pass
		{0o700, 999, 995, true}, // its own
		{0o600, 999, 995, false},
		{0o071, 999, 995, false}, // the owner's bits decide for the owner
	} {
		if got := Passable(c.perm, c.uid, c.gid, job); got != c.want {
			t.Errorf("Passable(%04o, %d, %d) = %v, want %v", c.perm, c.uid, c.gid, got, c.want)
		}
	}
	if !Passable(0o700, 5, 5, &User{UID: 0}) {
		t.Error("root cannot pass a 0700 directory")
	}
}

func TestCheckReachable(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	private := filepath.Join(open, "private")
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{{open, 0o711}, {private, 0o700}} {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	// A uid that owns none of it, in no group of it.
	other := &User{Name: "other", UID: 54321, GID: 54321}
	if err := CheckReachable(filepath.Join(open, "not-yet", "runs"), other); err != nil {
		t.Errorf("a path through passable directories: %v", err)
	}
	err := CheckReachable(filepath.Join(private, "runs"), other)
	if err == nil || !strings.Contains(err.Error(), private) {
		t.Errorf("a path through a 0700 directory: %v, want an error naming %s", err, private)
	}
}

// Ensure makes DefaultUser on a host that lacks it: a system account
// with no login shell. The server makes it too; it is left in place, as
// the server leaves it (docs/security.md).
func TestEnsureMakesTheDefaultUser(t *testing.T) {
	testutil.RequireRoot(t)
	u, err := Ensure(context.Background(), DefaultUser)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != DefaultUser || u.UID == 0 || u.GID == 0 {
		t.Errorf("Ensure = %+v", u)
	}
	if again, err := Lookup(DefaultUser); err != nil || *again != *u {
		t.Errorf("Lookup after Ensure = %+v, %v; want %+v", again, err, u)
	}
	if _, err := Ensure(context.Background(), "ferry-no-such-user"); err == nil || !strings.Contains(err.Error(), "create the account") {
		t.Errorf("Ensure of another missing account: %v", err)
	}
}

func TestChownTreeDoesNotFollowLinks(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	u := &User{Name: "other", UID: 54321, GID: 54322}
	if err := ChownTree(root, u); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root, filepath.Join(root, "a", "b"), filepath.Join(root, "a", "link")} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid := owner(fi); uid != 54321 || gid != 54322 {
			t.Errorf("%s is %d:%d", p, uid, gid)
		}
	}
	fi, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	if uid, _ := owner(fi); uid != uint32(os.Getuid()) {
		t.Errorf("the link's target outside the tree changed owner to %d", uid)
	}
}

func TestReachablePath(t *testing.T) {
	private, open := t.TempDir(), t.TempDir()
	for d, mode := range map[string]os.FileMode{private: 0o700, open: 0o755, filepath.Dir(open): 0o755} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	other := &User{Name: "other", UID: 54321, GID: 54321}
	path := strings.Join([]string{filepath.Join(private, "bin"), "relative/bin", open, "", "/usr/bin"}, ":")
	if got, want := ReachablePath(path, other), open+":/usr/bin"; got != want {
		t.Errorf("ReachablePath = %q, want %q", got, want)
	}
}
