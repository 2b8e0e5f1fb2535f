package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Batch stores many blobs with two file-system syncs in all instead of two
// for each: Put writes each blob to a temporary file, and Commit makes them
// all durable at once, then installs them. Storing thousands of small files
// one by one is bound by fsync; a batch is bound by the disk.
//
// A Batch is used by one goroutine. Until Commit returns, none of its blobs
// is visible; a Batch that is not committed must be aborted, which removes
// its temporary files.
type Batch struct {
	s       *Store
	pending []pendingBlob
	seen    map[string]bool
}

type pendingBlob struct {
	tmp, digest string
}

// NewBatch starts a batch of Puts.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, seen: map[string]bool{}}
}

// Put reads one blob from r, which must hash to want (a valid digest), and
// returns its size. Content the store or the batch already holds is read
// and dropped. Errors are those of Store.Put.
func (b *Batch) Put(r io.Reader, want string) (int64, error) {
	if err := checkDigest(want); err != nil {
		return 0, err
	}
	if b.seen[want] || b.s.Has(want) {
		h := sha256.New()
		n, err := io.Copy(h, r)
		if err != nil {
			return 0, fmt.Errorf("put blob %s: %w", want, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return 0, fmt.Errorf("put blob %s: got content with digest %s (%d bytes): %w", want, got, n, ErrDigestMismatch)
		}
		return n, nil
	}
	tmp, err := os.CreateTemp(b.s.dir, tempPattern)
	if err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Chmod(0o444)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			err = fmt.Errorf("got content with digest %s (%d bytes): %w", got, n, ErrDigestMismatch)
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("put blob %s: %w", want, err)
	}
	b.seen[want] = true
	b.pending = append(b.pending, pendingBlob{tmp: tmp.Name(), digest: want})
	return n, nil
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
	for i, p := range b.pending {
		fan := filepath.Join(b.s.dir, p.digest[:2])
		err := os.MkdirAll(fan, 0o755)
		if err == nil {
			err = os.Rename(p.tmp, b.s.path(p.digest))
		}
		if err != nil {
			b.pending = b.pending[i:]
			return fmt.Errorf("put blob %s: %w", p.digest, err)
		}
	}
	b.pending = nil
	if err := syncFS(b.s.dir); err != nil {
		return fmt.Errorf("put blobs: %w", err)
	}
	return nil
}

// Abort removes the temporary files of blobs not yet installed.
func (b *Batch) Abort() {
	for _, p := range b.pending {
		os.Remove(p.tmp)
	}
	b.pending = nil
}
