// Package selfexe keeps a stable copy of the running ferry binary.
//
// `go run ./cmd/ferry quickstart` runs a binary that Go deletes when the
// command ends, but the server it starts must outlive it and keep starting
// runners from some binary. So whoever starts long-lived ferry processes
// first installs a copy of itself, named by its content hash, and starts
// those from the copy.
//
// The binary is some 55 MB. A copy is a hard link where it can be (no room
// taken), a process started from a copy makes none of its own (a node
// agent the server started), and copies of older binaries that no process
// runs any more are removed (Prune), so that upgrades do not pile them up.
package selfexe

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// copyName is the name of a copy: ferry- and 16 hex digits of the SHA-256
// of its content.
var copyName = regexp.MustCompile(`^ferry-[0-9a-f]{16}$`)

// Install returns a stable path of the running executable, to start
// long-lived ferry processes from. When the executable is itself a copy
// that Install made (its name says so, and it is the file running), that
// is its path: a process started from a copy makes none of its own.
// Otherwise it is dir/ferry-HASH, made once per distinct binary: a hard
// link to the executable when dir is on its file system and the link is
// allowed, else a copy.
func Install(dir string) (string, error) {
	src, err := os.Open("/proc/self/exe") // still readable if the file was deleted
	exe, exeErr := os.Executable()
	if err != nil {
		if exeErr != nil {
			return "", fmt.Errorf("find own executable: %w", err)
		}
		if src, err = os.Open(exe); err != nil {
			return "", fmt.Errorf("open own executable: %w", err)
		}
	}
	defer src.Close()
	self, err := src.Stat()
	if err != nil {
		return "", fmt.Errorf("own executable: %w", err)
	}
	if exeErr == nil && copyName.MatchString(filepath.Base(exe)) {
		if fi, err := os.Stat(exe); err == nil && os.SameFile(fi, self) {
			return exe, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, src); err != nil {
		return "", fmt.Errorf("hash own executable: %w", err)
	}
	dst := filepath.Join(dir, "ferry-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if exeErr == nil && linkExecutable(exe, self, dst) == nil {
		return dst, nil
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return dst, WriteExecutable(src, dst)
}

// linkExecutable hard-links exe, when it is still the running file self
// and every account may run it, to dest, through a temporary name beside
// dest. The link keeps the binary's inode: an upgrade that replaces exe
// leaves the link as it was. It fails across file systems, and where the
// kernel refuses links to files of other owners (protected_hardlinks).
func linkExecutable(exe string, self os.FileInfo, dest string) error {
	fi, err := os.Stat(exe)
	if err != nil || !os.SameFile(fi, self) {
		return errors.New("the executable's path is not the running file")
	}
	if fi.Mode().Perm()&0o555 != 0o555 {
		return errors.New("the executable may not be run by every account")
	}
	tmp := filepath.Join(filepath.Dir(dest), ".ferry-link-"+strconv.Itoa(os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// WriteExecutable writes what src holds to dest, mode 0755, through a
// temporary file beside dest, so that dest is never seen half written.
func WriteExecutable(src io.Reader, dest string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".ferry-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// Prune removes the copies in dir, other than keep, that no live process
// runs, and returns their paths. A copy a process runs (a runner or a node
// agent started before an upgrade, which may start more runners from it)
// stays until a later Prune finds it unused. A Slurm job waiting in its
// queue names the copy it will run but is no process yet: a copy pruned
// under it fails that job's start.
func Prune(dir, keep string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var old []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if copyName.MatchString(e.Name()) && e.Type().IsRegular() && p != keep {
			old = append(old, p)
		}
	}
	if len(old) == 0 {
		return nil, nil
	}
	running := runningFiles()
	var removed []string
	for _, p := range old {
		fi, err := os.Stat(p)
		if err != nil || running.holds(fi) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// fileSet is a set of files by identity (device and inode).
type fileSet []os.FileInfo

func (s fileSet) holds(fi os.FileInfo) bool {
	for _, x := range s {
		if os.SameFile(x, fi) {
			return true
		}
	}
	return false
}

// runningFiles are the executables of the live processes this process may
// inspect: all of them for root, its own user's otherwise, which are the
// only ones that run a copy in a folder of its.
func runningFiles() fileSet {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var set fileSet
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		// Stat of /proc/PID/exe is the running file, even one deleted
		// or replaced since.
		if fi, err := os.Stat(filepath.Join("/proc", p.Name(), "exe")); err == nil {
			set = append(set, fi)
		}
	}
	return set
}
