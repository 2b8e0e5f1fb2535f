// Package blob is Ferry's content-addressed blob store on the local
// filesystem.
//
// A blob is named by the lowercase hex SHA-256 of its content. A blob
// stored on its own lives at dir/ab/abcdef... (the first two hex characters
// are a fan-out folder, so no single directory grows to millions of
// entries); the small blobs of a Batch live together in a pack file
// (pack.go). Either way they are written under a temporary name, hashed
// while written, synced and then renamed into place, so a reader never
// sees a partial blob and concurrent writers of the same content are
// harmless: each rename installs identical bytes.
//
// Digests that come from outside are validated before any path is built
// from them, so a malformed digest can never name a file outside the store.
package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrNotFound is wrapped by errors for a blob the store does not hold.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalidDigest is wrapped by errors for a digest that is not 64
	// lowercase hex characters.
	ErrInvalidDigest = errors.New("invalid blob digest (want 64 lowercase hex characters of SHA-256)")
	// ErrDigestMismatch is wrapped by errors for content whose SHA-256 is not
	// the digest it was announced with.
	ErrDigestMismatch = errors.New("blob content does not match its digest")
)

// tempPattern names in-flight uploads. It starts with a dot so it can never
// collide with a fan-out folder (two hex characters).
const tempPattern = ".tmp-*"

// ValidDigest reports whether d is a well-formed SHA-256 digest: exactly 64
// lowercase hexadecimal characters.
func ValidDigest(d string) bool {
	if len(d) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Store is a content-addressed blob store rooted at one directory. Its
// methods are safe for concurrent use, also by several processes sharing the
// directory.
type Store struct {
	dir string

	mu        sync.RWMutex
	packs     []string // names of the packs read, in packs/
	packNames map[string]bool
	packsSeen int // entries of packs/ when last listed
	index     map[packKey]packLoc
}

// Open opens the store in dir, creating the directory if needed, and reads
// the index of every pack. A damaged pack is an error naming it.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	s := &Store{dir: abs, packNames: map[string]bool{}, index: map[packKey]packLoc{}}
	if err := s.loadPacks(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reader reads one stored blob. It seeks and reads at offsets (what
// http.ServeContent needs) and knows its size; the caller closes it.
type Reader struct {
	*io.SectionReader
	f *os.File
}

// Close closes the file the blob is read from.
func (r *Reader) Close() error { return r.f.Close() }

// path returns where the blob with a validated digest lives.
func (s *Store) path(digest string) string {
	return filepath.Join(s.dir, digest[:2], digest)
}

func checkDigest(d string) error {
	if !ValidDigest(d) {
		return fmt.Errorf("digest %q: %w", d, ErrInvalidDigest)
	}
	return nil
}

// Has reports whether the store holds the blob. A malformed digest is
// never held.
func (s *Store) Has(digest string) bool {
	return s.has(digest, true)
}

// has is Has; refresh says to look for packs another process wrote when
// the blob is not known.
func (s *Store) has(digest string, refresh bool) bool {
	if !ValidDigest(digest) {
		return false
	}
	if _, _, ok := s.lookup(digest, false); ok {
		return true
	}
	if fi, err := os.Stat(s.path(digest)); err == nil && fi.Mode().IsRegular() {
		return true
	}
	if !refresh {
		return false
	}
	_, _, ok := s.lookup(digest, true)
	return ok
}

// Put stores everything read from r and returns its digest and size. If want
// is not empty it is the digest the content must have: a malformed want is an
// error wrapping ErrInvalidDigest (nothing is read), and content that hashes
// to something else is an error wrapping ErrDigestMismatch (nothing is
// stored). Storing content the store already holds is not an error.
func (s *Store) Put(r io.Reader, want string) (digest string, size int64, err error) {
	if want != "" {
		if err := checkDigest(want); err != nil {
			return "", 0, err
		}
	}
	tmp, err := os.CreateTemp(s.dir, tempPattern)
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", err)
	}
	tmpName := tmp.Name()
	installed := false
	defer func() {
		if !installed {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()

	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", err)
	}
	digest = hex.EncodeToString(h.Sum(nil))
	if want != "" && digest != want {
		return "", 0, fmt.Errorf("put blob %s: got content with digest %s (%d bytes): %w", want, digest, size, ErrDigestMismatch)
	}
	// Blobs never change once stored; read-only makes accidental writes fail.
	if err := tmp.Chmod(0o444); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	if s.Has(digest) {
		return digest, size, nil
	}
	fan := filepath.Join(s.dir, digest[:2])
	if err := os.MkdirAll(fan, 0o755); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	// rename is atomic: a concurrent Put of the same content either finds
	// the blob above or replaces it with identical bytes.
	if err := os.Rename(tmpName, s.path(digest)); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	installed = true
	if err := syncDir(fan); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", digest, err)
	}
	return digest, size, nil
}

// syncDir makes a rename into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// PutFile stores the content of the file at path and returns its digest and
// size.
func (s *Store) PutFile(path string) (digest string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", err)
	}
	defer f.Close()
	digest, size, err = s.Put(f, "")
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", path, err)
	}
	return digest, size, nil
}

// Open opens the blob for reading; the caller closes it. A blob the store
// does not hold is an error wrapping ErrNotFound, a malformed digest one
// wrapping ErrInvalidDigest.
func (s *Store) Open(digest string) (*Reader, error) {
	if err := checkDigest(digest); err != nil {
		return nil, err
	}
	if loc, name, ok := s.lookup(digest, false); ok {
		return s.openPacked(name, loc)
	}
	f, err := os.Open(s.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		if loc, name, ok := s.lookup(digest, true); ok {
			return s.openPacked(name, loc)
		}
		return nil, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digest, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blob %s: %w", digest, err)
	}
	return &Reader{SectionReader: io.NewSectionReader(f, 0, fi.Size()), f: f}, nil
}

// Size returns the size in bytes of a stored blob, with the same errors as
// Open.
func (s *Store) Size(digest string) (int64, error) {
	if err := checkDigest(digest); err != nil {
		return 0, err
	}
	if loc, _, ok := s.lookup(digest, false); ok {
		return loc.size, nil
	}
	fi, err := os.Stat(s.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		if loc, _, ok := s.lookup(digest, true); ok {
			return loc.size, nil
		}
		return 0, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", digest, err)
	}
	return fi.Size(), nil
}

// Missing returns the digests the store does not hold, in the order given
// and each once; the result is never nil. Any malformed digest is an error
// wrapping ErrInvalidDigest.
func (s *Store) Missing(digests []string) ([]string, error) {
	var uniq []string
	seen := make(map[string]bool, len(digests))
	for _, d := range digests {
		if err := checkDigest(d); err != nil {
			return nil, err
		}
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, d)
		}
	}
	s.refresh() // once for all, not once per digest not held
	// Several lookups at once: each that misses the packs waits on a stat.
	held := make([]bool, len(uniq))
	var wg sync.WaitGroup
	const chunk = 4096
	for lo := 0; lo < len(uniq); lo += chunk {
		wg.Go(func() {
			for i := lo; i < min(lo+chunk, len(uniq)); i++ {
				held[i] = s.has(uniq[i], false)
			}
		})
	}
	wg.Wait()
	missing := []string{}
	for i, d := range uniq {
		if !held[i] {
			missing = append(missing, d)
		}
	}
	return missing, nil
}
