// Package isolation keeps the jobs that run on the server's own host (the
// local target and process-provider nodes) away from the workspace's data
// directory, tokens and keys (docs/security.md).
//
// A server that runs as root starts its jobs' commands as an unprivileged
// account, DefaultUser unless told otherwise, which it makes when the host
// lacks it. The runner stays the server's user (it holds the run token, the
// node's caches and the log spool) and gives the job's processes the
// account's uid and gid with no supplementary groups. The job's own
// directories are the account's; everything on the way to them can be
// passed through but not listed; the data directory stays private to the
// server's user.
package isolation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultUser is the account jobs run as when the server runs as root and
// --run-as names none. The server makes it (a system account with no
// home, no login shell and a group of its own) on its first start.
const DefaultUser = "ferry-job"

// User is an account that jobs run as.
type User struct {
	Name string
	UID  uint32
	GID  uint32
	Home string // from the account database; it may not exist
}

// Lookup finds an account by name or by numeric uid.
func Lookup(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil && errors.As(err, &unknown) {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q is not a number", name, u.Gid)
	}
	return &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}, nil
}

// Choose decides which account jobs run as, from --run-as (flag), the
// server's effective uid and its user name. It returns "" when jobs run
// as the server's own user: by default when the server is not root, and
// when flag names the server's own user (root choosing to trust its jobs).
// A server that is not root cannot start processes as anyone else.
func Choose(flag string, euid int, self string) (string, error) {
	switch {
	case flag == "" && euid == 0:
		return DefaultUser, nil
	case flag == "" || flag == self || flag == strconv.Itoa(euid):
		return "", nil
	case euid != 0:
		return "", fmt.Errorf("--run-as %s: only a server running as root can start jobs as another user; leave --run-as out to run them as %s", flag, self)
	}
	return flag, nil
}

// Ensure returns the account name, making it first when it is
// DefaultUser and the host lacks it. Any other account must exist.
func Ensure(ctx context.Context, name string) (*User, error) {
	u, err := Lookup(name)
	if err == nil || name != DefaultUser {
		if err != nil {
			return nil, fmt.Errorf("--run-as: %w; create the account first (useradd --system %s) or name another", err, name)
		}
		return u, nil
	}
	shell := "/usr/sbin/nologin"
	if _, err := os.Stat(shell); err != nil {
		shell = "/bin/false"
	}
	// Servers starting together race to make it; /etc/passwd's lock makes
	// the loser fail, and the account is there when it looks again.
	var out []byte
	for try := 0; try < 10; try++ {
		cmd := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", shell, name)
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		if u, lerr := Lookup(name); lerr == nil {
			return u, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("making the account %s that jobs run as: useradd: %v: %s; make it yourself, or name another with --run-as (such as nobody)",
			name, err, strings.TrimSpace(string(out)))
	}
	return Lookup(name)
}

// Credential is the process credential of the account: its uid and gid,
// and no supplementary groups (root's would otherwise stay).
func (u *User) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// Passable says whether a directory of mode perm, owned by uid and gid,
// can be passed through (searched) by u, who has no supplementary groups.
// Root may pass anything.
func Passable(perm fs.FileMode, uid, gid uint32, u *User) bool {
	switch {
	case u.UID == 0:
		return true
	case uid == u.UID:
		return perm&0o100 != 0
	case gid == u.GID:
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}

// CheckReachable returns an error naming the first existing directory on
// the way to path (path included) that u cannot pass through. Directories
// not made yet are not checked: Ferry makes them passable.
func CheckReachable(path string, u *User) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	var dirs []string
	for d := abs; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(dirs[i])
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner information", dirs[i])
		}
		if !Passable(fi.Mode().Perm(), st.Uid, st.Gid, u) {
			return fmt.Errorf("%s (mode %04o) cannot be passed through by %s (uid %d)", dirs[i], fi.Mode().Perm(), u.Name, u.UID)
		}
	}
	return nil
}

// ChownTree gives root and everything under it to u. Symlinks are changed
// themselves, never followed.
func ChownTree(root string, u *User) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
}

// ReachablePath is the list of directories path (PATH's form) less those
// u cannot reach: a job's PATH, and where the runner looks for the Python
// it builds the job's environments from, which the job must be able to
// run (a pyenv under /root, say, is root's alone).
func ReachablePath(path string, u *User) string {
	var keep []string
	for _, d := range filepath.SplitList(path) {
		if d != "" && filepath.IsAbs(d) && CheckReachable(d, u) == nil {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}
