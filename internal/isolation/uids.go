package isolation

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Attempts of different jobs must not share an account: one that shares
// it can write into another's folders while they are uploaded, read its
// /proc/PID/environ (its secrets and run token) and signal it. So a root
// runner runs each attempt as a uid of its own, taken from a range for
// the attempt's life and given back at its end: Nomad's "dynamic workload
// users" (a range of uids with no account behind them, 80000-89999 by
// default there too, and here), rather than accounts made with useradd
// (slow, serialised on /etc/passwd's lock, and left behind) or one shared
// account (what this replaces). Slurm and Kubernetes run a job as its
// submitter's or its image's user; a workspace's jobs have no such user,
// so the range is what separates them.
//
// The uid's group is a group of the same number, alone: a job shares no
// group with another either. There is no passwd entry: the job gets HOME,
// USER and LOGNAME in its environment, which is what programs ask first.
//
// Leases are files in one folder of the host, LeaseDir, each held with
// flock(2) by the runner whose attempt runs as that uid: every runner and
// every server on the host (two servers on one machine included) takes
// uids from the same folder, and a runner that dies, even by SIGKILL,
// gives its uid back, as the kernel drops its lock. What such a runner
// left is put away by the next holder: the file names the attempt folder
// the uid was given, which is closed to everyone but root (0700) before
// the uid is used again, and any process of the uid still alive is killed.

// DefaultUIDs is the range of uids attempts run as by default.
const DefaultUIDs = "80000-89999"

// LeaseDir is the host's folder of uid leases. A variable for tests.
var LeaseDir = "/run/ferry/uids"

// UIDRange is a range of uids, First to Last inclusive.
type UIDRange struct{ First, Last uint32 }

// String is the range as ParseUIDRange reads it.
func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParseUIDRange reads "FIRST-LAST" (uids above 999, the system accounts,
// and below 2^31).
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("uid range %q: want FIRST-LAST, such as %s", s, DefaultUIDs)
	}
	if first < 1000 || last < first || last >= 1<<31 {
		return UIDRange{}, fmt.Errorf("uid range %q: want 1000 <= FIRST <= LAST < 2147483648, such as %s", s, DefaultUIDs)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

// Lease is a uid held for one attempt.
type Lease struct {
	UID uint32
	f   *os.File
}

// ErrNoUID is returned when every uid of the range is held.
var ErrNoUID = errors.New("every uid of the range is in use")

// Acquire takes a free uid of r for the attempt whose folder is dir, and
// records dir in its lease. A uid that an account of the host has is
// never taken.
func Acquire(r UIDRange, dir string) (*Lease, error) {
	if err := os.MkdirAll(LeaseDir, 0o700); err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	n := uint64(r.Last-r.First) + 1
	start := rand.Uint64N(n)
	for i := range n {
		uid := r.First + uint32((start+i)%n)
		l, err := tryLease(uid)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		if hasAccount(uid) {
			// An account of the host has it: never given to a job.
			l.f.Close()
			continue
		}
		if err := l.reclaim(dir); err != nil {
			l.f.Close()
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("uid range %s: %w; widen it (--job-uids) or run fewer attempts on this host at once", r, ErrNoUID)
}

// tryLease takes the lease of uid, or returns nil when another holds it.
func tryLease(uid uint32) (*Lease, error) {
	f, err := os.OpenFile(filepath.Join(LeaseDir, strconv.Itoa(int(uid))), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid lease %d: %w", uid, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		f.Close()
		return nil, nil
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("uid lease %d: %w", uid, err)
	}
	return &Lease{UID: uid, f: f}, nil
}

// released is the lease file's first line after a clean Release: nothing of
// the uid is left to put away.
const released = "released"

// reclaim puts away what a previous holder of the uid left, unless it
// released the uid cleanly, then records dir as the uid's.
func (l *Lease) reclaim(dir string) error {
	buf := make([]byte, 4096)
	n, err := l.f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("uid lease %d: %w", l.UID, err)
	}
	if prev, _, _ := strings.Cut(string(buf[:n]), "\n"); prev != "" && prev != released {
		KillUID(l.UID)
		closeDir(prev)
	}
	return l.write(dir + "\n")
}

// write records s, a line, at the start of the lease file. What an earlier
// longer line left after it is past its newline, and never read: the file
// is not truncated, which on ext4 makes its close wait for the disk
// (auto_da_alloc), a cost every attempt would pay twice.
func (l *Lease) write(s string) error {
	if _, err := l.f.WriteAt([]byte(s), 0); err != nil {
		return fmt.Errorf("uid lease %d: %w", l.UID, err)
	}
	return nil
}

// Release gives the uid back once its attempt has ended: the attempt's
// folder dir is closed to everyone but root (what the job left there, of
// its uid, stays out of reach of the next holder), any process of the uid
// still alive is killed, and the lease is marked clean and unlocked.
func (l *Lease) Release(dir string) error {
	defer l.f.Close()
	KillUID(l.UID)
	var errs []error
	if err := closeDir(dir); err != nil {
		errs = append(errs, err)
	} else if err := l.write(released + "\n"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// User is the account the attempt runs as: the lease's uid, with a group
// of the same number, named after base (for USER and LOGNAME) and with no
// home of its own.
func (l *Lease) User(base string) *User {
	return &User{Name: fmt.Sprintf("%s-%d", base, l.UID), UID: l.UID, GID: l.UID, Home: "/nonexistent"}
}

// accounts caches the uids of /etc/passwd, read again when it changes:
// the C library's lookup (os/user) cost 0.17 ms an attempt. Accounts from
// other sources (LDAP, say) in the range are not seen; keep --job-uids
// clear of them.
var accounts struct {
	sync.Mutex
	stamp string // modification time and size of the file read
	uids  map[uint32]bool
}

// hasAccount says whether an account of the host has uid.
func hasAccount(uid uint32) bool {
	const passwd = "/etc/passwd"
	fi, err := os.Stat(passwd)
	if err != nil {
		return false
	}
	stamp := fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
	accounts.Lock()
	defer accounts.Unlock()
	if accounts.stamp != stamp {
		b, err := os.ReadFile(passwd)
		if err != nil {
			return false
		}
		uids := map[uint32]bool{}
		for line := range strings.Lines(string(b)) {
			f := strings.Split(line, ":")
			if len(f) > 2 {
				if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					uids[uint32(n)] = true
				}
			}
		}
		accounts.stamp, accounts.uids = stamp, uids
	}
	return accounts.uids[uid]
}

// closeDir makes dir root's alone (0700), if it is still there.
func closeDir(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil
	}
	err := os.Chmod(dir, 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// KillUID sends SIGKILL to every process of uid (whose real or saved uid
// it is). It does so as kill(2) does for kill -1: from a thread of this
// process that takes uid as its real and effective uid for the call
// (credentials are per thread in Linux; the raw system call changes only
// the calling one) and gives them back after, in a goroutine of its own
// locked to that thread, so that should giving them back fail, the
// thread goes with the goroutine and nothing else ever runs on it. A
// few system calls, where finding the uid's processes in /proc took a
// stat of every process (0.2 ms with a hundred; reading their status
// files, 6 ms).
func KillUID(uid uint32) {
	if uid == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			runtime.UnlockOSThread()
			return
		}
		_, _, _ = syscall.RawSyscall(syscall.SYS_KILL, ^uintptr(0), uintptr(syscall.SIGKILL), 0)
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, 0, 0, 0); e != 0 {
			return // locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
	}()
	<-done
}
