package blob

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
)

// Batch stores many blobs with two file-system syncs in all instead of two
// for each: Put writes each blob to a temporary file, and Commit makes them
// all durable at once, then installs them. Storing thousands of small files
// one by one is bound by fsync; a batch is bound by the disk.
//
// Put is safe for concurrent use; Commit and Abort are called once, after
// every Put has returned. Until Commit returns, none of the batch's blobs
// is visible; a Batch that is not committed must be aborted, which removes
// its temporary files.
type Batch struct {
	s      *Store
	prefix string // of this batch's temporary files
	next   atomic.Int64

	mu      sync.Mutex
	pending []pendingBlob
	seen    map[string]bool
}

type pendingBlob struct {
	tmp, digest string
}

// NewBatch starts a batch of Puts.
func (s *Store) NewBatch() *Batch {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return &Batch{s: s, prefix: filepath.Join(s.dir, ".tmp-batch-"+hex.EncodeToString(r[:])+"-"), seen: map[string]bool{}}
}

// copyBufs are the copy buffers of batch Puts: thousands of tiny blobs
// would otherwise allocate one each.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// Put reads one blob from r, which must hash to want (a valid digest), and
// returns its size. Content the store or the batch already holds is read
// and dropped. Errors are those of Store.Put.
func (b *Batch) Put(r io.Reader, want string) (int64, error) {
	if err := checkDigest(want); err != nil {
		return 0, err
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	b.mu.Lock()
	dup := b.seen[want]
	b.seen[want] = true // reserved: a concurrent Put of the same content only checks it
	b.mu.Unlock()
	if dup || b.s.Has(want) {
		h := sha256.New()
		n, err := io.CopyBuffer(h, r, *buf)
		if err != nil {
			return 0, fmt.Errorf("put blob %s: %w", want, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return 0, fmt.Errorf("put blob %s: got content with digest %s (%d bytes): %w", want, got, n, ErrDigestMismatch)
		}
		return n, nil
	}
	n, tmp, err := b.write(r, want, *buf)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		delete(b.seen, want)
		return 0, fmt.Errorf("put blob %s: %w", want, err)
	}
	b.pending = append(b.pending, pendingBlob{tmp: tmp, digest: want})
	return n, nil
}

// write copies r into a new read-only temporary file and checks its digest.
func (b *Batch) write(r io.Reader, want string, buf []byte) (int64, string, error) {
	name := b.prefix + strconv.FormatInt(b.next.Add(1), 10)
	// Read-only from the start: blobs never change once stored.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), r, buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			err = fmt.Errorf("got content with digest %s (%d bytes): %w", got, n, ErrDigestMismatch)
		}
	}
	if err != nil {
		os.Remove(name)
		return 0, "", err
	}
	return n, name, nil
}

// Commit makes every blob of the batch durable and then installs them
// under their digests: a crash leaves either no blob or a whole one, as
// with Store.Put.
func (b *Batch) Commit() error {
	if len(b.pending) == 0 {
		return nil
	}
	if err := syncFS(b.s.dir); err != nil {
		return fmt.Errorf("put blobs: %w", err)
	}
	// The fan-out folders first (256 at most), then the renames, several
	// at once: each waits on the file system more than on a CPU.
	fans := map[string]bool{}
	for _, p := range b.pending {
		if fan := p.digest[:2]; !fans[fan] {
			fans[fan] = true
			if err := os.MkdirAll(filepath.Join(b.s.dir, fan), 0o755); err != nil {
				return fmt.Errorf("put blob %s: %w", p.digest, err)
			}
		}
	}
	installed := make([]bool, len(b.pending))
	errs := make([]error, commitWorkers)
	var wg sync.WaitGroup
	for w := range commitWorkers {
		wg.Go(func() {
			for i := w; i < len(b.pending); i += commitWorkers {
				p := b.pending[i]
				if err := os.Rename(p.tmp, b.s.path(p.digest)); err != nil {
					errs[w] = fmt.Errorf("put blob %s: %w", p.digest, err)
					return
				}
				installed[i] = true
			}
		})
	}
	wg.Wait()
	var left []pendingBlob
	for i, p := range b.pending {
		if !installed[i] {
			left = append(left, p)
		}
	}
	b.pending = left
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := syncFS(b.s.dir); err != nil {
		return fmt.Errorf("put blobs: %w", err)
	}
	return nil
}

// commitWorkers is how many renames a Commit runs at once.
const commitWorkers = 4

// Abort removes the temporary files of blobs not yet installed.
func (b *Batch) Abort() {
	for _, p := range b.pending {
		os.Remove(p.tmp)
	}
	b.pending = nil
}
