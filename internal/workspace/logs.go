package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// logStore keeps each job attempt's combined stdout/stderr as an append-only
// file. Appends are idempotent by offset, so a runner that resends a chunk
// after a lost reply (or a server restart) never duplicates or drops bytes.
type logStore struct {
	dir   string
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func newLogStore(dir string) (*logStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &logStore{dir: dir, locks: map[string]*sync.Mutex{}}, nil
}

// path is where an attempt's log is kept: rank 0's (the only one of a
// single-node job) as <attempt>.log, other node ranks' beside it.
func (l *logStore) path(job string, attempt, rank int) string {
	name := strconv.Itoa(attempt)
	if rank > 0 {
		name += ".rank" + strconv.Itoa(rank)
	}
	return filepath.Join(l.dir, job, name+".log")
}

func (l *logStore) lock(job string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.locks[job]
	if !ok {
		m = &sync.Mutex{}
		l.locks[job] = m
	}
	return m
}

// errLogGap says a chunk starts past the end of what is stored.
var errLogGap = errors.New("log chunk leaves a gap")

// Append writes data, which starts at byte offset of the attempt's log, and
// returns the log's new size. Bytes already stored are skipped; a chunk that
// starts past the end fails with errLogGap and the current size.
func (l *logStore) Append(job string, attempt, rank int, offset int64, data []byte) (int64, error) {
	m := l.lock(job)
	m.Lock()
	defer m.Unlock()
	p := l.path(job, attempt, rank)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if offset > size {
		return size, fmt.Errorf("%w: chunk starts at %d, log has %d bytes", errLogGap, offset, size)
	}
	skip := size - offset
	if skip >= int64(len(data)) {
		return size, nil
	}
	n, err := f.Write(data[skip:])
	if err != nil {
		return size, err
	}
	// Durable before we acknowledge: the runner drops what we acknowledge.
	if err := f.Sync(); err != nil {
		return size, err
	}
	return size + int64(n), nil
}

// Size returns the stored size of an attempt's log (0 if none yet).
func (l *logStore) Size(job string, attempt, rank int) int64 {
	st, err := os.Stat(l.path(job, attempt, rank))
	if err != nil {
		return 0
	}
	return st.Size()
}

// ReadAt copies the log from offset to w, at most max bytes, and returns how
// many bytes it copied.
func (l *logStore) ReadAt(job string, attempt, rank int, offset, max int64, w io.Writer) (int64, error) {
	f, err := os.Open(l.path(job, attempt, rank))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, io.NewSectionReader(f, offset, max))
}
