// Package snapshot makes and materialises code snapshots: a job's source
// directory, content-addressed per file.
//
// A Manifest lists every file of a snapshot with its path, mode, size and
// SHA-256 digest; the file contents live in a blob store under their
// digests, so unchanged files are uploaded and cached once however many
// snapshots share them. Build walks a local directory (honouring
// .ferryignore, .amlignore or .gitignore at its root) into a manifest,
// and Extract writes a manifest back out into a directory.
//
// Manifests come from clients and are untrusted: Validate (run by
// ParseManifest and Extract) confines every path to the snapshot directory,
// and Extract writes through an os.Root so that nothing, not even a symlink
// planted in the destination, can make it write outside.
package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ferry-ml/ferry/internal/blob"
)

// Limits on what a manifest may hold.
const (
	// MaxFiles is the most files one snapshot may hold.
	MaxFiles = 1_000_000
	// MaxPathLen is the longest path, in bytes, a snapshot file may have.
	MaxPathLen = 4096
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrInvalidManifest is wrapped by every error Validate returns.
	ErrInvalidManifest = errors.New("invalid snapshot manifest")
	// ErrUnsafePath is wrapped by errors for a path that is not a clean,
	// relative path confined to the snapshot directory, that clashes with
	// another path, or for a symlink that points outside it.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrTooLarge is wrapped by the error Build returns when a directory is
	// over the size limit.
	ErrTooLarge = errors.New("snapshot too large")
)

// File is one regular file of a snapshot.
type File struct {
	Path   string `json:"path"`   // slash-separated, relative, clean
	Mode   uint32 `json:"mode"`   // permission bits only (0o777 mask): 0644 or 0755 from Build
	Size   int64  `json:"size"`   // bytes
	Digest string `json:"sha256"` // lowercase hex SHA-256 of the content
}

// Manifest lists the files of a snapshot, sorted by Path. Directories are
// implied by the file paths; empty directories are not recorded.
type Manifest struct {
	Files []File `json:"files"`
}

// checkPath reports what is unsafe about a snapshot path, or nil.
func checkPath(p string) error {
	if why := pathProblem(p); why != "" {
		return fmt.Errorf("%w: %w %q: %s", ErrInvalidManifest, ErrUnsafePath, p, why)
	}
	return nil
}

// pathProblem says what is unsafe about a snapshot path ("contains a
// backslash ..."), or "" when it is safe.
func pathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > MaxPathLen:
		return fmt.Sprintf("is %d bytes long, over the limit of %d", len(p), MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "contains a NUL byte"
	case !utf8.ValidString(p):
		return "is not valid UTF-8"
	case strings.IndexByte(p, '\\') >= 0:
		return "contains a backslash (paths are slash-separated)"
	case p[0] == '/':
		return "is absolute (must be relative to the snapshot root)"
	}
	for c := range strings.SplitSeq(p, "/") {
		switch c {
		case "..":
			return `has a ".." component`
		case ".":
			return `has a "." component`
		case "":
			return "has an empty component"
		}
	}
	if path.Clean(p) != p {
		return fmt.Sprintf("is not clean (want %q)", path.Clean(p))
	}
	return ""
}

// Validate checks that the manifest is safe to extract: every path is
// relative, clean, slash-separated, valid UTF-8 and at most MaxPathLen
// bytes, with no "." or ".." component, no backslash and no NUL; no path is
// listed twice or is both a file and a directory of another file; every
// digest is valid, every size non-negative, every mode within 0o777; and
// there are at most MaxFiles files. Errors name the offending path and wrap
// ErrInvalidManifest, and also ErrUnsafePath for path problems and
// blob.ErrInvalidDigest for digest problems. The files need not be sorted.
func (m *Manifest) Validate() error {
	if len(m.Files) > MaxFiles {
		return fmt.Errorf("%w: %d files, over the limit of %d", ErrInvalidManifest, len(m.Files), MaxFiles)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: %w %q: listed more than once", ErrInvalidManifest, ErrUnsafePath, f.Path)
		}
		seen[f.Path] = true
		if !blob.ValidDigest(f.Digest) {
			return fmt.Errorf("%w: file %q: sha256 %q: %w", ErrInvalidManifest, f.Path, f.Digest, blob.ErrInvalidDigest)
		}
		if f.Size < 0 {
			return fmt.Errorf("%w: file %q: size %d is negative", ErrInvalidManifest, f.Path, f.Size)
		}
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("%w: file %q: mode %#o has bits outside 0o777", ErrInvalidManifest, f.Path, f.Mode)
		}
	}
	for _, f := range m.Files {
		for i := range len(f.Path) {
			if f.Path[i] == '/' && seen[f.Path[:i]] {
				return fmt.Errorf("%w: %w %q: is a file and also the directory of %q", ErrInvalidManifest, ErrUnsafePath, f.Path[:i], f.Path)
			}
		}
	}
	return nil
}

func comparePath(a, b File) int { return strings.Compare(a.Path, b.Path) }

// sorted returns the files sorted by path, never nil, leaving m untouched.
func (m *Manifest) sorted() []File {
	files := append([]File{}, m.Files...)
	slices.SortFunc(files, comparePath)
	return files
}

// canonical returns the manifest's canonical JSON: files sorted by path, an
// empty manifest written as {"files":[]}.
func (m *Manifest) canonical() []byte {
	b, err := json.Marshal(Manifest{Files: m.sorted()})
	if err != nil {
		// Marshalling strings and integers cannot fail.
		panic(fmt.Sprintf("snapshot: marshal manifest: %v", err))
	}
	return b
}

// ID returns the snapshot's identity: the lowercase hex SHA-256 of its
// canonical JSON. Manifests listing the same files, in any order, have the
// same ID; changing any path, mode or content changes it.
func (m *Manifest) ID() string {
	h := sha256.Sum256(m.canonical())
	return hex.EncodeToString(h[:])
}

// MarshalCanonical returns the canonical JSON whose SHA-256 is ID: what to
// store or send so that the receiver computes the same ID.
func (m *Manifest) MarshalCanonical() []byte { return m.canonical() }

// TotalSize returns the sum of the sizes of all files.
func (m *Manifest) TotalSize() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Digests returns the distinct digests of the files, sorted: the blobs a
// snapshot needs.
func (m *Manifest) Digests() []string {
	ds := make([]string, 0, len(m.Files))
	for _, f := range m.Files {
		ds = append(ds, f.Digest)
	}
	slices.Sort(ds)
	return slices.Compact(ds)
}

// ParseManifest decodes a manifest strictly (unknown fields, trailing data
// and a missing files list are errors), validates it and sorts its files by
// path.
func ParseManifest(data []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw struct {
		Files *[]File `json:"files"`
	}
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidManifest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: unexpected data after the manifest", ErrInvalidManifest)
	}
	if raw.Files == nil {
		return nil, fmt.Errorf(`%w: "files" is missing`, ErrInvalidManifest)
	}
	m := &Manifest{Files: *raw.Files}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	slices.SortFunc(m.Files, comparePath)
	return m, nil
}

// Diff compares two manifests by path: added are paths only in new, removed
// paths only in old, changed paths in both whose content or mode differ.
// Each list is sorted.
func Diff(old, new *Manifest) (added, removed, changed []string) {
	before := make(map[string]File, len(old.Files))
	for _, f := range old.Files {
		before[f.Path] = f
	}
	for _, f := range new.sorted() {
		o, ok := before[f.Path]
		switch {
		case !ok:
			added = append(added, f.Path)
		case o.Digest != f.Digest || o.Mode != f.Mode || o.Size != f.Size:
			changed = append(changed, f.Path)
		}
		delete(before, f.Path)
	}
	for p := range before {
		removed = append(removed, p)
	}
	slices.Sort(removed)
	return added, removed, changed
}
