package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StatCache remembers the digest of every file a Build hashed, keyed by
// what the file system says of the file (size, modification and change
// time in nanoseconds, inode and device), as git's index does, so that a
// folder sent again is read only where it changed. It keeps one file per
// snapshot root in its directory.
//
// A cached digest is trusted only when all of those still match and the
// file's modification and change times are older, by racyMargin, than the
// moment the build that hashed it began: a file written in the same clock
// tick as it was hashed could be written again in that tick without any of
// them changing ("racy git"), so such a file is hashed again next time. A
// cache file that is damaged, cut short, of another format, of another
// root, not a regular file, not owned by this user or writable by others
// is ignored, never trusted. Where the platform gives no change time and
// inode (not Linux), nothing is cached.
//
// A StatCache is safe for concurrent use by several processes: each writes
// a whole new file and renames it into place.
type StatCache struct {
	dir string
	now func() time.Time
}

// NewStatCache returns the stat cache kept in dir (created when first
// written, readable only by its owner). now is the clock a build's start
// is read from (nil: time.Now).
func NewStatCache(dir string, now func() time.Time) *StatCache {
	if now == nil {
		now = time.Now
	}
	return &StatCache{dir: dir, now: now}
}

// racyMargin is how much older than the start of the build that hashed it
// a file's times must be for its digest to be trusted later: more than any
// file system's timestamp granularity (FAT's is 2 s; ext4's a clock tick).
const racyMargin = 2 * time.Second

// statCacheMaxAge is how long a root's cache file is kept unused.
const statCacheMaxAge = 30 * 24 * time.Hour

const (
	statCacheMagic = "FERRYSC1"
	statCacheExt   = ".stat"
)

// fileStat is what the file system says of a file that a changed file
// would not say the same way.
type fileStat struct {
	size, mtime, ctime int64 // ns since the epoch
	ino, dev           uint64
}

// statRecord is one cached file.
type statRecord struct {
	st     fileStat
	digest [sha256.Size]byte
}

// statTable is one root's cache as read: the digests it may trust.
type statTable struct {
	stamp   int64 // ns: when the build that wrote it began
	records map[string]statRecord
}

// fileName is where root's cache lives: one file per root, named by the
// hash of its real path.
func (c *StatCache) fileName(root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16])+statCacheExt)
}

// load reads root's cache; nil when there is none or it is not to be
// trusted.
func (c *StatCache) load(root string) *statTable {
	name := c.fileName(root)
	fi, err := os.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || !ownedByMe(fi) {
		return nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	t, err := parseStatCache(data, root)
	if err != nil {
		return nil
	}
	return t
}

// lookup returns the digest cached for the file src with stat st, if it
// may be trusted.
func (t *statTable) lookup(src string, st fileStat) (string, bool) {
	if t == nil {
		return "", false
	}
	r, ok := t.records[src]
	if !ok || r.st != st || racy(st, t.stamp) {
		return "", false
	}
	return hex.EncodeToString(r.digest[:]), true
}

// racy reports whether a file with stat st may have changed in the clock
// tick of a build that began at stamp without its stat changing.
func racy(st fileStat, stamp int64) bool {
	return max(st.mtime, st.ctime) >= stamp-int64(racyMargin)
}

// save writes root's cache: the files of a build that began at stamp,
// with their digests, leaving out those it could not trust later. Errors
// are returned for the caller to ignore or report: a cache that is not
// written only costs hashing next time. It also removes cache files of
// other roots unused for statCacheMaxAge.
func (c *StatCache) save(root string, stamp time.Time, entries []entry, files []File) error {
	ns := stamp.UnixNano()
	b := []byte(statCacheMagic)
	b = binary.AppendUvarint(b, uint64(len(root)))
	b = append(b, root...)
	b = binary.AppendVarint(b, ns)
	var body []byte
	n := 0
	for i, e := range entries {
		if !e.hasStat || e.st.size != files[i].Size || racy(e.st, ns) {
			continue
		}
		d, err := hex.DecodeString(files[i].Digest)
		if err != nil || len(d) != sha256.Size {
			continue
		}
		body = binary.AppendUvarint(body, uint64(len(e.src)))
		body = append(body, e.src...)
		body = binary.AppendUvarint(body, uint64(e.st.size))
		body = binary.AppendVarint(body, e.st.mtime)
		body = binary.AppendVarint(body, e.st.ctime)
		body = binary.AppendUvarint(body, e.st.ino)
		body = binary.AppendUvarint(body, e.st.dev)
		body = append(body, d...)
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, body...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	c.prune(root)
	// No sync: a file cut short by a crash fails its checksum and is
	// ignored.
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.fileName(root))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// prune removes the cache files of roots other than root not written for
// statCacheMaxAge, and temporary files a crash left.
func (c *StatCache) prune(root string) {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	keep := filepath.Base(c.fileName(root))
	for _, de := range des {
		name := de.Name()
		if name == keep || !(strings.HasSuffix(name, statCacheExt) || strings.HasPrefix(name, ".tmp-")) {
			continue
		}
		if fi, err := de.Info(); err == nil && c.now().Sub(fi.ModTime()) > statCacheMaxAge {
			os.Remove(filepath.Join(c.dir, name))
		}
	}
}

var errBadStatCache = errors.New("not a stat cache of this root")

// parseStatCache reads a cache file written by save for root, checking
// everything: its checksum, its root, and that every field fits.
func parseStatCache(data []byte, root string) (*statTable, error) {
	if len(data) < len(statCacheMagic)+sha256.Size || string(data[:len(statCacheMagic)]) != statCacheMagic {
		return nil, errBadStatCache
	}
	body, tail := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], tail) {
		return nil, errBadStatCache
	}
	r := statReader{b: body[len(statCacheMagic):]}
	if string(r.bytes(MaxPathLen*4)) != root {
		return nil, errBadStatCache
	}
	t := &statTable{stamp: r.varint()}
	n := r.uvarint()
	if r.err != nil || n > MaxFiles {
		return nil, errBadStatCache
	}
	t.records = make(map[string]statRecord, min(n, uint64(len(r.b)/(sha256.Size+6))))
	for range n {
		src := string(r.bytes(MaxPathLen * 4))
		var rec statRecord
		rec.st.size = int64(r.uvarint())
		rec.st.mtime = r.varint()
		rec.st.ctime = r.varint()
		rec.st.ino = r.uvarint()
		rec.st.dev = r.uvarint()
		copy(rec.digest[:], r.take(sha256.Size))
		if r.err != nil || rec.st.size < 0 {
			return nil, errBadStatCache
		}
		t.records[src] = rec
	}
	if len(r.b) != 0 {
		return nil, errBadStatCache
	}
	return t, nil
}

// statReader reads the fields of a cache file; the first problem sticks.
type statReader struct {
	b   []byte
	err error
}

func (r *statReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errBadStatCache
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *statReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = errBadStatCache
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *statReader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errBadStatCache
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// bytes reads a length and that many bytes, at most limit.
func (r *statReader) bytes(limit int) []byte {
	n := r.uvarint()
	if n > uint64(limit) {
		r.err = errBadStatCache
		return nil
	}
	return r.take(int(n))
}
