// Package serverurl is the file in which a server records, on its own
// host, the URL it serves at, and the following of that file by the
// processes the server started there: local runners, the local executor,
// process-provider agents and their runners. They outlive the server, and
// each was given the URL of its day; a server restarted at another
// address (another --addr or --advertise-url, a local workspace moved to
// another port) writes its new URL into the file, and a process that
// cannot reach the old one reads the file and calls the new one.
//
// Nothing of Ferry's is behind it: the runner, the agent and the client
// link it.
package serverurl

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// FileName is the file's name in the server's work dir. The URL is not a
// secret; the file is the server account's to write (0644 in a folder
// only it writes), so that no job can send another's runner elsewhere.
const FileName = "server.url"

// maxSize bounds what is read of the file: a URL, not a log.
const maxSize = 4096

// Write records u as the URL of the server in dir/FileName, atomically: a
// reader finds the old URL or the new one, never a part of either.
func Write(dir, u string) error {
	if _, err := Parse(u); err != nil {
		return fmt.Errorf("record the server's URL in %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+FileName+"-*")
	if err != nil {
		return fmt.Errorf("record the server's URL in %s: %w", dir, err)
	}
	defer os.Remove(f.Name()) // gone after the rename; left over after a failure
	_, err = f.WriteString(u + "\n")
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, FileName))
	}
	if err != nil {
		return fmt.Errorf("record the server's URL in %s: %w", dir, err)
	}
	return nil
}

// Read returns the URL recorded in the file at path.
func Read(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSize))
	if err != nil {
		return "", err
	}
	u, err := Parse(strings.TrimSpace(string(data)))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}

// Parse checks that s is a server's base URL, http(s)://host[:port][/path],
// and returns it without a trailing slash.
func Parse(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not a server URL such as http://127.0.0.1:8581", s)
	}
	return strings.TrimRight(s, "/"), nil
}

// URL is a server's URL that follows the file its server records it in.
// Safe for concurrent use.
type URL struct {
	file string
	// Moved, when set, is called once for each change of the URL that
	// Reread finds, with the old URL and the new: a runner or agent logs it.
	Moved func(from, to string)
	// BadFile, when set, is called when the file cannot be read or holds
	// no URL, once until it is read well again.
	BadFile func(err error)

	mu     sync.Mutex
	cur    string
	badNow bool
}

// New is the URL u, which follows file ("" = never changes).
func New(u, file string) *URL {
	return &URL{cur: strings.TrimRight(u, "/"), file: file}
}

// Get is the URL to call now.
func (u *URL) Get() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cur
}

// File is the file u follows ("" = none).
func (u *URL) File() string { return u.file }

// Reread reads the file again and, when it names another URL, calls that
// one from now on; it says whether the URL changed. Callers call it when
// a call could not reach the server, not before each call: the file
// changes only when the server starts somewhere else, and a server that
// answers is where it was.
func (u *URL) Reread() bool {
	if u.file == "" {
		return false
	}
	next, err := Read(u.file)
	u.mu.Lock()
	if err != nil {
		// A file not there yet (a server older than this one, or one
		// that never ran here) is no news: the URL stays.
		report := !u.badNow && !errors.Is(err, os.ErrNotExist)
		u.badNow = u.badNow || report
		u.mu.Unlock()
		if report && u.BadFile != nil {
			u.BadFile(err)
		}
		return false
	}
	u.badNow = false
	prev := u.cur
	if next == prev {
		u.mu.Unlock()
		return false
	}
	u.cur = next
	u.mu.Unlock()
	if u.Moved != nil {
		u.Moved(prev, next)
	}
	return true
}
