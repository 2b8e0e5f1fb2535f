package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
)

// Batch stores many blobs with one fsync for all of them instead of two
// for each: Put appends every blob to one pack file (pack.go), and Commit
// makes the pack durable and publishes it. Storing thousands of files one
// by one is bound by fsync and file creation, and even a few hundred
// files of some MiB each pay a journal commit apiece; a batch is bound by
// the disk's bandwidth.
//
// Put is safe for concurrent use; Commit and Abort are called once, after
// every Put has returned. Until Commit, none of the batch's blobs is
// visible; a Batch that is not committed must be aborted, which removes its
// temporary file.
type Batch struct {
	s *Store

	mu   sync.Mutex
	pack *packWriter // made by the first blob
	seen map[string]bool
}

// NewBatch starts a batch of Puts.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, seen: map[string]bool{}}
}

// copyBufs are the copy buffers of batch Puts: thousands of tiny blobs
// would otherwise allocate one each.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// packBufs hold a blob while it is checked, before it goes into a pack.
var packBufs = sync.Pool{New: func() any { b := make([]byte, packMax+1); return &b }}

// Put reads one blob from r, which must hash to want (a valid digest), and
// returns its size. Content the batch or a known pack already holds is read
// and dropped (a blob stored on its own is not looked for: a stat for each
// of thousands of blobs would cost more than storing a small one twice). Errors are those of Store.Put; after an error the batch
// holds nothing of that blob.
func (b *Batch) Put(r io.Reader, want string) (int64, error) {
	if err := checkDigest(want); err != nil {
		return 0, err
	}
	b.mu.Lock()
	dup := b.seen[want]
	b.seen[want] = true // reserved: a concurrent Put of the same content only checks it
	b.mu.Unlock()
	// Packs of other processes are not looked for either: at worst a blob
	// is stored twice.
	if _, _, packed := b.s.lookup(want, false); dup || packed {
		buf := copyBufs.Get().(*[]byte)
		defer copyBufs.Put(buf)
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
	n, err := b.put(r, want)
	if err != nil {
		b.mu.Lock()
		delete(b.seen, want)
		b.mu.Unlock()
		return 0, fmt.Errorf("put blob %s: %w", want, err)
	}
	return n, nil
}

// put stores a blob neither the store nor the batch holds. A blob of up
// to packMax bytes is read whole and checked before it goes into the
// pack; a larger one is checked as it is written there.
func (b *Batch) put(r io.Reader, want string) (int64, error) {
	buf := packBufs.Get().(*[]byte)
	defer packBufs.Put(buf)
	n, err := ReadUpTo(r, *buf)
	switch {
	case err != nil:
		return 0, err
	case n == len(*buf): // over packMax
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.openPack(); err != nil {
			return 0, err
		}
		_, n, err := b.pack.addFrom(io.MultiReader(bytes.NewReader(*buf), r), want, nil)
		return n, err
	}
	data := (*buf)[:n]
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != want {
		return 0, fmt.Errorf("got content with digest %s (%d bytes): %w", hex.EncodeToString(got[:]), n, ErrDigestMismatch)
	}
	k, _ := keyOf(want)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.openPack(); err != nil {
		return 0, err
	}
	return int64(n), b.pack.add(k, data)
}

// openPack starts the batch's pack if it has none. The caller holds b.mu.
func (b *Batch) openPack() error {
	if b.pack != nil {
		return nil
	}
	p, err := newPackWriter(b.s.dir)
	if err != nil {
		return err
	}
	b.pack = p
	return nil
}

// Add reads one blob from r, whatever its content, stores it as Put does
// and returns its digest and size: it is for content whose digest the
// sender did not compute, hashed here once as it is written. Content the
// batch or a known pack holds already is dropped after hashing.
func (b *Batch) Add(r io.Reader) (string, int64, error) {
	buf := packBufs.Get().(*[]byte)
	defer packBufs.Put(buf)
	n, err := ReadUpTo(r, *buf)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("put blob: %w", err)
	case n == len(*buf): // over packMax: hashed as it is packed
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.openPack(); err != nil {
			return "", 0, fmt.Errorf("put blob: %w", err)
		}
		held := func(d string) bool {
			_, _, packed := b.s.lookup(d, false)
			return b.seen[d] || packed
		}
		d, n, err := b.pack.addFrom(io.MultiReader(bytes.NewReader(*buf), r), "", held)
		if err != nil {
			return "", 0, fmt.Errorf("put blob: %w", err)
		}
		b.seen[d] = true
		return d, n, nil
	}
	data := (*buf)[:n]
	k := packKey(sha256.Sum256(data))
	d := hex.EncodeToString(k[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[d] {
		return d, int64(n), nil
	}
	if _, _, packed := b.s.lookup(d, false); packed {
		return d, int64(n), nil
	}
	if err := b.openPack(); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", d, err)
	}
	if err := b.pack.add(k, data); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", d, err)
	}
	b.seen[d] = true
	return d, int64(n), nil
}

// ReadUpTo reads r into buf until r ends or buf is full. Unlike
// io.ReadFull, a reader that ends before buf is full is no error
// (n < len(buf), nil); only a failing read is.
func ReadUpTo(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Commit makes every blob of the batch durable and visible: the pack is
// synced, then renamed into packs/ and its folder synced. A crash leaves
// either no blob or a whole one, as with Store.Put.
func (b *Batch) Commit() error {
	if b.pack == nil {
		return nil
	}
	p := b.pack
	if err := p.finish(); err != nil {
		return fmt.Errorf("put blobs: %w", err)
	}
	name, err := p.publish(b.s.dir)
	if err != nil {
		return fmt.Errorf("put blobs: %w", err)
	}
	b.pack = nil
	b.s.mu.Lock()
	b.s.addPack(name, p.entries)
	b.s.packsSeen++
	b.s.mu.Unlock()
	return nil
}

// Abort removes the temporary file of a batch not committed.
func (b *Batch) Abort() {
	if b.pack != nil {
		b.pack.abort()
		b.pack = nil
	}
}
