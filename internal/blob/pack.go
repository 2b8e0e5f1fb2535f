package blob

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A pack holds many small blobs in one file, so that storing thousands of
// them costs one file, one fsync and one rename instead of thousands of
// each. It lives at dir/packs/NAME.pack and is laid out as
//
//	magic "FERRYPK1"
//	the blobs' content, one after the other
//	index: for each blob, its digest (32 bytes), offset and size (8 bytes each, big endian)
//	trailer: the index's offset and entry count (8 bytes each), its SHA-256 (32 bytes), magic "FERRYPKX"
//
// A pack is written under a temporary name, synced, and only then renamed
// into packs/, so a pack under its final name is always whole: a crash
// while writing one leaves a temporary file that no reader looks at. The
// store reads every pack's index into memory when it opens and whenever a
// lookup misses and packs/ holds packs it has not read (written by another
// process). Packs are never changed or removed once published.
const (
	packDir       = "packs"
	packExt       = ".pack"
	packMagic     = "FERRYPK1"
	packEnd       = "FERRYPKX"
	packEntrySize = sha256.Size + 16
	packTrailer   = 16 + sha256.Size + len(packEnd)
)

// packMax is the largest blob a batch reads whole, to check it before it
// goes into the pack; a larger one is checked as it is written there, and
// cut off again if it is refused.
const packMax = 1 << 20

// packLoc is where a packed blob lives.
type packLoc struct {
	pack      int32 // index into Store.packs
	off, size int64
}

// packKey is a digest's binary form, the key of the in-memory index.
type packKey [sha256.Size]byte

func keyOf(digest string) (packKey, bool) {
	var k packKey
	_, err := hex.Decode(k[:], []byte(digest))
	return k, err == nil
}

// packWriter writes one pack under a temporary name.
type packWriter struct {
	f       *os.File
	w       *bufio.Writer
	off     int64
	entries []packEntry
}

type packEntry struct {
	key       packKey
	off, size int64
}

func newPackWriter(dir string) (*packWriter, error) {
	f, err := os.CreateTemp(dir, ".tmp-pack-*")
	if err != nil {
		return nil, err
	}
	// Read-only from the start: packs never change once stored.
	if err := f.Chmod(0o444); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	p := &packWriter{f: f, w: bufio.NewWriterSize(f, 256<<10)}
	if _, err := p.w.WriteString(packMagic); err != nil {
		p.abort()
		return nil, err
	}
	p.off = int64(len(packMagic))
	return p, nil
}

// add appends a blob whose digest was checked.
func (p *packWriter) add(k packKey, data []byte) error {
	if _, err := p.w.Write(data); err != nil {
		return err
	}
	p.entries = append(p.entries, packEntry{key: k, off: p.off, size: int64(len(data))})
	p.off += int64(len(data))
	return nil
}

// addFrom appends a blob read from r, hashing it as it is written, and
// returns its digest and size. want, if not "", is the digest it must
// have; drop, if not nil, says that a blob with this digest is held
// already. A blob that does not hash to want, that is dropped, or whose
// reading fails is cut off the pack again.
func (p *packWriter) addFrom(r io.Reader, want string, drop func(digest string) bool) (string, int64, error) {
	start := p.off
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(p.w, h), r, *buf)
	p.off += n
	if err != nil {
		return "", 0, errors.Join(err, p.cut(start))
	}
	var k packKey
	h.Sum(k[:0])
	d := hex.EncodeToString(k[:])
	if want != "" && d != want {
		err := fmt.Errorf("got content with digest %s (%d bytes): %w", d, n, ErrDigestMismatch)
		return "", 0, errors.Join(err, p.cut(start))
	}
	if drop != nil && drop(d) {
		return d, n, p.cut(start)
	}
	p.entries = append(p.entries, packEntry{key: k, off: start, size: n})
	return d, n, nil
}

// cut drops what was written past off.
func (p *packWriter) cut(off int64) error {
	if err := p.w.Flush(); err != nil {
		return err
	}
	if err := p.f.Truncate(off); err != nil {
		return err
	}
	if _, err := p.f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	p.w.Reset(p.f)
	p.off = off
	return nil
}

// finish writes the index and trailer and syncs the file; the pack is
// whole on disk, still under its temporary name.
func (p *packWriter) finish() error {
	index := make([]byte, 0, len(p.entries)*packEntrySize+packTrailer)
	for _, e := range p.entries {
		index = append(index, e.key[:]...)
		index = binary.BigEndian.AppendUint64(index, uint64(e.off))
		index = binary.BigEndian.AppendUint64(index, uint64(e.size))
	}
	sum := sha256.Sum256(index)
	index = binary.BigEndian.AppendUint64(index, uint64(p.off))
	index = binary.BigEndian.AppendUint64(index, uint64(len(p.entries)))
	index = append(index, sum[:]...)
	index = append(index, packEnd...)
	if _, err := p.w.Write(index); err != nil {
		return err
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	if err := p.f.Sync(); err != nil {
		return err
	}
	return p.f.Close()
}

// publish renames the finished pack into packs/ and makes the rename
// durable; it returns the pack's name.
func (p *packWriter) publish(dir string) (string, error) {
	var r [12]byte
	_, _ = rand.Read(r[:])
	name := hex.EncodeToString(r[:]) + packExt
	packs := filepath.Join(dir, packDir)
	if err := os.MkdirAll(packs, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(p.f.Name(), filepath.Join(packs, name)); err != nil {
		return "", err
	}
	return name, syncDir(packs)
}

func (p *packWriter) abort() {
	p.f.Close()
	os.Remove(p.f.Name())
}

// readPackIndex reads and checks the index of the pack file at path.
func readPackIndex(path string) ([]packEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	bad := func(why string) error {
		return fmt.Errorf("pack %s is damaged (%s); its blobs cannot be read: move it out of the store to start without them", path, why)
	}
	if size < int64(len(packMagic)+packTrailer) {
		return nil, bad("too short")
	}
	tr := make([]byte, packTrailer)
	if _, err := f.ReadAt(tr, size-int64(packTrailer)); err != nil {
		return nil, err
	}
	if string(tr[packTrailer-len(packEnd):]) != packEnd {
		return nil, bad("no trailer")
	}
	indexOff := int64(binary.BigEndian.Uint64(tr[0:8]))
	count := binary.BigEndian.Uint64(tr[8:16])
	if indexOff < int64(len(packMagic)) || count > uint64(size)/packEntrySize || indexOff+int64(count)*packEntrySize != size-int64(packTrailer) {
		return nil, bad("its trailer does not fit the file")
	}
	index := make([]byte, count*packEntrySize)
	if _, err := f.ReadAt(index, indexOff); err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(index); !bytes.Equal(sum[:], tr[16:16+sha256.Size]) {
		return nil, bad("its index does not match its checksum")
	}
	entries := make([]packEntry, count)
	for i := range entries {
		e := index[i*packEntrySize:]
		copy(entries[i].key[:], e[:sha256.Size])
		entries[i].off = int64(binary.BigEndian.Uint64(e[sha256.Size:]))
		entries[i].size = int64(binary.BigEndian.Uint64(e[sha256.Size+8:]))
		if entries[i].off < int64(len(packMagic)) || entries[i].size < 0 || entries[i].off+entries[i].size > indexOff {
			return nil, bad("an index entry points outside the content")
		}
	}
	return entries, nil
}

// loadPacks reads the index of every pack in packs/ the store has not
// read yet. The caller holds s.mu for writing.
func (s *Store) loadPacks() error {
	des, err := os.ReadDir(filepath.Join(s.dir, packDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob store %s: %w", s.dir, err)
	}
	if len(des) == s.packsSeen {
		return nil // packs are never removed: the same count is the same set
	}
	s.packsSeen = len(des)
	var errs []error
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, packExt) || s.packNames[name] {
			continue
		}
		entries, err := readPackIndex(filepath.Join(s.dir, packDir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("blob store %s: %w", s.dir, err))
			continue
		}
		s.addPack(name, entries)
	}
	return errors.Join(errs...)
}

// addPack makes a pack's blobs visible. The caller holds s.mu for writing.
func (s *Store) addPack(name string, entries []packEntry) {
	s.packs = append(s.packs, name)
	s.packNames[name] = true
	i := int32(len(s.packs) - 1)
	for _, e := range entries {
		if _, ok := s.index[e.key]; !ok {
			s.index[e.key] = packLoc{pack: i, off: e.off, size: e.size}
		}
	}
}

// lookup finds a packed blob; refresh says to look for packs written by
// another process when it is not known.
func (s *Store) lookup(digest string, refresh bool) (packLoc, string, bool) {
	k, ok := keyOf(digest)
	if !ok {
		return packLoc{}, "", false
	}
	s.mu.RLock()
	loc, ok := s.index[k]
	var name string
	if ok {
		name = s.packs[loc.pack]
	}
	s.mu.RUnlock()
	if ok || !refresh {
		return loc, name, ok
	}
	s.refresh()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if loc, ok = s.index[k]; ok {
		name = s.packs[loc.pack]
	}
	return loc, name, ok
}

// refresh reads packs other processes published. A pack it cannot read
// stays unseen; Open reports it.
func (s *Store) refresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.loadPacks()
}

// openPacked opens a packed blob for reading.
func (s *Store) openPacked(name string, loc packLoc) (*Reader, error) {
	f, err := os.Open(filepath.Join(s.dir, packDir, name))
	if err != nil {
		return nil, err
	}
	return &Reader{SectionReader: io.NewSectionReader(f, loc.off, loc.size), f: f}, nil
}
