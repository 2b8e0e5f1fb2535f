package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/isolation"
)

// privateDataDir makes the data dir 0700 and its files 0600: the store
// (ferry.db, its -wal and -shm), the owner token, the workspace key and
// the server's own files. A directory made before with a looser mode, or
// files an older server left readable, are tightened too. Jobs must never
// read any of it (docs/security.md).
func privateDataDir(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: make it private (0700): %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("data dir: make %s private: %w", p, err)
			}
		}
	}
	return nil
}

// jobAccount is the account that jobs on this host run as, made if it is
// isolation.DefaultUser and missing; nil when they run as the server's
// own user.
func jobAccount(ctx context.Context, flag string) (*isolation.User, error) {
	self := strconv.Itoa(os.Geteuid())
	if u, err := user.Current(); err == nil {
		self = u.Username
	}
	name, err := isolation.Choose(flag, os.Geteuid(), self)
	if err != nil || name == "" {
		return nil, err
	}
	return isolation.Ensure(ctx, name)
}

// sharedWorkRoot holds the work dirs of servers whose jobs run as another
// user and whose data dir lies where that user cannot pass (under /root,
// say): one per data dir.
const sharedWorkRoot = "/var/lib/ferry-work"

// jobUIDRange is --job-uids checked: the range, or "" for "none".
func jobUIDRange(flag string) (string, error) {
	switch flag {
	case "none":
		return "", nil
	case "":
		flag = isolation.DefaultUIDs
	}
	r, err := isolation.ParseUIDRange(flag)
	if err != nil {
		return "", fmt.Errorf("--job-uids: %w; or none, to run every job as the --run-as account", err)
	}
	return r.String(), nil
}

// defaultWorkDir is DATA_DIR-work beside the data dir; when jobs run as
// another user who cannot pass through the way there, it is
// /var/lib/ferry-work/HASH, HASH being that of the data dir's path.
func defaultWorkDir(dataDir string, u *isolation.User) string {
	sibling := filepath.Clean(dataDir) + "-work"
	if u == nil || isolation.CheckReachable(filepath.Dir(sibling), u) == nil {
		return sibling
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return filepath.Join(sharedWorkRoot, hex.EncodeToString(sum[:6]))
}

// workDir checks and makes the work dir: outside the data dir, private
// to the server's user when jobs run as it, and passable (0711, not
// listable) by the job user when they do not.
func workDir(dataDir, flag string, u *isolation.User) (string, error) {
	dir := flag
	if dir == "" {
		dir = defaultWorkDir(dataDir, u)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--work-dir: %w", err)
	}
	if within(dir, dataDir) || within(dataDir, dir) {
		return "", fmt.Errorf("--work-dir %s: it must be outside the data dir %s (and not contain it): jobs work there and must not reach the data dir", dir, dataDir)
	}
	mode := os.FileMode(0o700)
	if u != nil {
		mode = 0o711
		// The work dir itself is given its mode below, whatever it had.
		if err := isolation.CheckReachable(filepath.Dir(dir), u); err != nil {
			return "", fmt.Errorf("--work-dir %s: jobs run as %s, who must reach it, and %v; choose a work dir such as %s/NAME, or make the way passable (chmod o+x)", dir, u.Name, err, sharedWorkRoot)
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", fmt.Errorf("--work-dir %s: %w", dir, err)
		}
		if filepath.Dir(dir) == sharedWorkRoot {
			markTopDir(sharedWorkRoot) // before the work dir is made (topdir.go)
		}
	}
	// nodes/ too: the process provider sets the mode of nodes/process and
	// below, and one made by a server that ran jobs as itself is 0700.
	for _, d := range []string{dir, filepath.Join(dir, "nodes")} {
		if err := os.MkdirAll(d, mode); err != nil {
			return "", fmt.Errorf("--work-dir %s: %w", dir, err)
		}
		if err := os.Chmod(d, mode); err != nil {
			return "", fmt.Errorf("--work-dir %s: %w", dir, err)
		}
	}
	return dir, nil
}

// within says whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
