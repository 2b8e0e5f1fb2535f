package snapshot

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/ferry-ml/ferry/internal/blob"
)

// ignoreFiles are the ignore files Build looks for at the root of a
// directory, in order of precedence: only the first one that exists is read.
var ignoreFiles = []string{".ferryignore", ".amlignore", ".gitignore"}

// BuildOptions control Walk, WalkFile and Build.
type BuildOptions struct {
	// MaxSize is the most bytes the snapshot may hold in all; 0 means no
	// limit. It is checked before any file is read.
	MaxSize int64
	// UseIgnoreFiles makes Build leave out what the first of .ferryignore,
	// .amlignore and .gitignore at the root of the directory matches, with
	// gitignore semantics. Only that one file is read.
	UseIgnoreFiles bool
	// Cache, when not nil, gives the digests of files unchanged since a
	// build of the same root hashed them, and learns those hashed now.
	Cache *StatCache
}

// entry is a file found by the walk, not yet hashed.
type entry struct {
	rel  string // snapshot path
	src  string // absolute local path to read, symlinks resolved
	mode uint32
	size int64 // from stat; the hash pass records what it actually read
	// st is what the walk's stat said, for the stat cache, when hasStat.
	st      fileStat
	hasStat bool
}

// hashFile returns the SHA-256 and length of a local file, opened by open. When keep is not
// nil and the whole file fits in it with room to spare, the file is read
// into it and data is that content (keep[:n]); else data is nil. Tests
// replace it to check that nothing is read before the size limit is checked.
var hashFile = func(open func(string) (*os.File, error), name string, keep []byte) (digest string, n int64, data []byte, err error) {
	f, err := open(name)
	if err != nil {
		return "", 0, nil, err
	}
	defer f.Close()
	h := sha256.New()
	if keep != nil {
		k, err := blob.ReadUpTo(f, keep)
		if err != nil {
			return "", 0, nil, err
		}
		h.Write(keep[:k])
		if k < len(keep) {
			return hex.EncodeToString(h.Sum(nil)), int64(k), keep[:k:k], nil
		}
		n = int64(k) // the file grew since it was listed: hash the rest
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	// Read, not io.Copy: an *os.File's WriteTo allocates a buffer of its
	// own on every call, which a tree of many tiny files pays for in GC.
	for {
		k, err := f.Read(*buf)
		h.Write((*buf)[:k])
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", 0, nil, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil, nil
}

// copyBufs are hashFile's read buffers: a tree of many tiny files would
// otherwise allocate one per file.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// Content that BuildOutputs keeps in memory while it hashes, so that an
// upload need not read the files again: files of at most keepFileMax
// bytes, keepTotal bytes in all.
const (
	keepFileMax = 1 << 20
	keepTotal   = 64 << 20
	keepSlab    = 1 << 20 // kept content is carved from slabs this large
)

// Build makes the manifest of the directory root. It returns the manifest
// and, for every digest in it, the absolute local path of a file with that
// content (what to upload it from). It is Walk, then Tree.Hash.
func Build(root string, opt BuildOptions) (*Manifest, map[string]string, error) {
	t, err := Walk(root, opt)
	if err != nil {
		return nil, nil, err
	}
	return t.Hash(nil)
}

// Tree is a folder (or a file) listed for a snapshot, its files not yet
// read.
type Tree struct {
	display string // as the caller named it, for messages
	key     string // the real path of the root: what the stat cache is kept by
	entries []entry
	opt     BuildOptions
	stamp   time.Time // just before the walk began
}

// Walk lists the directory root for a snapshot, reading no file.
//
// A .git directory (or file) is always left out, and so, when
// opt.UseIgnoreFiles is set, is whatever the first of .ferryignore,
// .amlignore and .gitignore found at the root matches (a file inside an
// ignored directory cannot be re-included, as in git). Symlinks that
// resolve inside root are followed: a link to a file becomes a regular file
// with the target's content, a link to a directory is walked (a link to one
// of its own ancestors is an error). A symlink that resolves outside root,
// or not at all, is an error naming the link and its target, wrapping
// ErrUnsafePath for the former; an ignored link is never resolved. Sockets,
// FIFOs and devices are skipped. A file's mode is 0755 if any execute bit
// is set, else 0644.
//
// The size limit is checked on the sizes the file system reports; over
// it, the error wraps ErrTooLarge and names the largest files.
func Walk(root string, opt BuildOptions) (*Tree, error) {
	stamp := opt.now()
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("snapshot %s: not a directory", root)
	}
	w := walker{root: real, display: root}
	if opt.UseIgnoreFiles {
		if w.ignore, err = readIgnoreFile(real); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", root, err)
		}
	}
	if err := w.walk(real, nil, map[string]bool{real: true}); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	if err := checkSize(root, w.entries, opt.MaxSize); err != nil {
		return nil, err
	}
	return &Tree{display: root, key: "dir:" + real, entries: w.entries, opt: opt, stamp: stamp}, nil
}

// WalkFile lists a single regular file (symlinks are followed) for a
// snapshot, under its base name. opt.UseIgnoreFiles has no effect.
func WalkFile(name string, opt BuildOptions) (*Tree, error) {
	stamp := opt.now()
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", name, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", name, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("snapshot %s: not a regular file", name)
	}
	rel := filepath.Base(abs)
	if err := checkPath(rel); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", name, err)
	}
	e := newEntry(rel, real, fi)
	if err := checkSize(name, []entry{e}, opt.MaxSize); err != nil {
		return nil, err
	}
	return &Tree{display: name, key: "file:" + real, entries: []entry{e}, opt: opt, stamp: stamp}, nil
}

func (o BuildOptions) now() time.Time {
	if o.Cache != nil {
		return o.Cache.now()
	}
	return time.Now()
}

func newEntry(rel, src string, fi fs.FileInfo) entry {
	e := entry{rel: rel, src: src, mode: modeOf(fi), size: fi.Size()}
	e.st, e.hasStat = statOf(fi)
	return e
}

// Len is how many files the tree holds.
func (t *Tree) Len() int { return len(t.entries) }

// TotalSize is the bytes the tree's files held when it was walked.
func (t *Tree) TotalSize() int64 {
	var n int64
	for _, e := range t.entries {
		n += e.size
	}
	return n
}

// Hashed is a file of a Tree with its digest, as Tree.Hash hands it on.
type Hashed struct {
	File
	// Src is the local file its content is read from.
	Src string
	// Data is its content when the file was read whole and kept (see
	// keepFileMax), else nil.
	Data []byte
	// Cached says that the digest came from the stat cache: the file was
	// not read.
	Cached bool
}

// Hash reads and hashes the tree's files in parallel (GOMAXPROCS at a
// time), taking the digests of files unchanged since a build of the same
// root from opt.Cache, and returns the manifest and, for every digest in
// it, the local path of a file with that content. It then tells the cache
// what it hashed; a cache that cannot be written only costs hashing next
// time.
//
// each, if not nil, is handed the files in runs as they are hashed, from
// one goroutine at a time, so that they can be sent while the rest are
// read; the small files' content comes along (Hashed.Data), up to a
// budget, so that they need not be read again. An error from each stops
// the hashing and is returned. The size limit is checked again on the
// sizes read: files may grow after the walk.
func (t *Tree) Hash(each func([]Hashed) error) (*Manifest, map[string]string, error) {
	var table *statTable
	if t.opt.Cache != nil {
		table = t.opt.Cache.load(t.key)
	}
	var mu sync.Mutex
	var done func(lo, hi int, files []File, datas [][]byte, cached []bool) error
	if each != nil {
		done = func(lo, hi int, files []File, datas [][]byte, cached []bool) error {
			run := make([]Hashed, 0, hi-lo)
			for i := lo; i < hi; i++ {
				h := Hashed{File: files[i], Src: t.entries[i].src, Cached: cached[i]}
				if datas != nil {
					h.Data = datas[i]
				}
				run = append(run, h)
			}
			mu.Lock()
			defer mu.Unlock()
			return each(run)
		}
	}
	files, errs, _, cached := hashEach(t.entries, hashOptions{
		keep:   each != nil,
		cached: func(e *entry) (string, bool) { return table.lookup(e.src, e.st) },
		done:   done,
	})
	for _, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("snapshot %s: %w", t.display, err)
		}
	}
	// The sizes actually read: files may have grown since the walk.
	if err := checkSize(t.display, t.entries, t.opt.MaxSize); err != nil {
		return nil, nil, err
	}
	srcs := make(map[string]string, len(t.entries))
	for i, f := range files {
		if _, ok := srcs[f.Digest]; !ok {
			srcs[f.Digest] = t.entries[i].src
		}
	}
	m := &Manifest{Files: slices.Clone(files)}
	slices.SortFunc(m.Files, comparePath)
	if err := m.Validate(); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", t.display, err)
	}
	if t.opt.Cache != nil && (table == nil || slices.Contains(cached, false)) {
		_ = t.opt.Cache.save(t.key, t.stamp, t.entries, files)
	}
	return m, srcs, nil
}

// hashOptions tune hashEach.
type hashOptions struct {
	// keep says to return the content of the small files read (see
	// keepFileMax).
	keep bool
	// cached, if not nil, gives the digest of an entry that need not be
	// read.
	cached func(e *entry) (string, bool)
	// done, if not nil, hears of each run of entries [lo, hi) as it is
	// finished without an error; an error from it stops the hashing and
	// is that of entry lo.
	done func(lo, hi int, files []File, datas [][]byte, cached []bool) error
	// open opens an entry's src to read it (nil: os.Open).
	open func(string) (*os.File, error)
}

// hashEach hashes the entries in parallel, updating their sizes to what
// was read, and returns the files and each entry's error in the same order.
// With keep, it also returns the content of the small files it read (see
// keepFileMax), in the same order (nil for the others). cached says which
// digests came from opt.cached.
func hashEach(entries []entry, opt hashOptions) (files []File, errs []error, datas [][]byte, cached []bool) {
	files = make([]File, len(entries))
	errs = make([]error, len(entries))
	cached = make([]bool, len(entries))
	if opt.keep {
		datas = make([][]byte, len(entries))
	}
	open := opt.open
	if open == nil {
		open = os.Open
	}
	var budget atomic.Int64
	budget.Store(keepTotal)
	var stop atomic.Bool
	next := make(chan [2]int, 16)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 8, max(len(entries), 1)) {
		wg.Go(func() {
			var slab []byte
			for r := range next {
				if stop.Load() {
					continue
				}
				first, end := r[0], r[1]
				failed := false
				for i := first; i < end; i++ {
					e := &entries[i]
					if opt.cached != nil && e.hasStat {
						if d, ok := opt.cached(e); ok {
							files[i] = File{Path: e.rel, Mode: e.mode, Size: e.size, Digest: d}
							cached[i] = true
							continue
						}
					}
					var room []byte
					if opt.keep && e.size < keepFileMax && budget.Add(-(e.size+1)) >= 0 {
						if int64(len(slab)) <= e.size {
							slab = make([]byte, max(keepSlab, e.size+1))
						}
						room = slab[:e.size+1]
					}
					d, n, data, err := hashFile(open, e.src, room)
					if err != nil {
						errs[i] = fmt.Errorf("%s: %w", e.rel, err)
						failed = true
						continue
					}
					if data != nil {
						datas[i] = data
						slab = slab[len(data):]
					}
					e.size = n
					files[i] = File{Path: e.rel, Mode: e.mode, Size: n, Digest: d}
				}
				if opt.done != nil && !failed {
					if err := opt.done(first, end, files, datas, cached); err != nil {
						errs[first] = err
						stop.Store(true)
					}
				}
			}
		})
	}
	for r := range runs(entries) {
		next <- r
	}
	close(next)
	wg.Wait()
	return files, errs, datas, cached
}

// Entries go to hashEach's workers in runs of at most hashRunFiles files and,
// past its first file, hashRunBytes bytes: one channel operation a file costs
// more than hashing a tiny one, and a run is what Tree.Hash hands on at
// once, so large files must not wait for many others.
const (
	hashRunFiles = 64
	hashRunBytes = 8 << 20
)

// runs yields the runs of entries, [first, end).
func runs(entries []entry) iter.Seq[[2]int] {
	return func(yield func([2]int) bool) {
		for first := 0; first < len(entries); {
			end, size := first+1, entries[first].size
			for end < len(entries) && end-first < hashRunFiles && size+entries[end].size <= hashRunBytes {
				size += entries[end].size
				end++
			}
			if !yield([2]int{first, end}) {
				return
			}
			first = end
		}
	}
}

// checkSize returns an ErrTooLarge error if the entries hold more than limit
// bytes (limit 0: no limit).
func checkSize(display string, entries []entry, limit int64) error {
	if limit <= 0 {
		return nil
	}
	var total int64
	for _, e := range entries {
		total += e.size
	}
	if total <= limit {
		return nil
	}
	largest := slices.Clone(entries)
	slices.SortStableFunc(largest, func(a, b entry) int {
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return strings.Compare(a.rel, b.rel)
	})
	largest = largest[:min(5, len(largest))]
	var b strings.Builder
	for i, e := range largest {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", e.rel, humanSize(e.size))
	}
	return fmt.Errorf("snapshot %s is %s, over the limit of %s; largest files: %s; add them to .ferryignore (or .amlignore/.gitignore) or raise the limit: %w",
		display, humanSize(total), humanSize(limit), b.String(), ErrTooLarge)
}

// humanSize formats a byte count in binary units: "512 B", "1.5 KiB",
// "3.2 GiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// modeOf maps a file's permissions to the two modes a snapshot records.
func modeOf(fi fs.FileInfo) uint32 {
	if fi.Mode().Perm()&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// readIgnoreFile reads the first of ignoreFiles that exists in dir into a
// matcher; nil if there is none.
func readIgnoreFile(dir string) (gitignore.Matcher, error) {
	for _, name := range ignoreFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		return gitignore.NewMatcher(parseIgnore(string(data))), nil
	}
	return nil, nil
}

// parseIgnore parses the lines of a gitignore-style file. Patterns are
// relative to the root, which is where the file lives.
func parseIgnore(text string) []gitignore.Pattern {
	var ps []gitignore.Pattern
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, nil))
	}
	return ps
}

// walker collects the files of a directory tree.
type walker struct {
	root    string // real (symlink-free) absolute path of the root
	display string // the root as the caller named it, for messages
	ignore  gitignore.Matcher
	entries []entry
	// skip, when set, hears of every entry that cannot be part of a
	// snapshot (an unsafe or dangling link, a bad name, a special file,
	// an unreadable directory) instead of the walk failing on it.
	skip func(rel, why string)
}

// walk adds the files under dir, whose real path is dir and whose snapshot
// path is parts. ancestors holds the real paths of dir and the directories
// above it, to catch symlink loops.
func (w *walker) walk(dir string, parts []string, ancestors map[string]bool) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		if w.skip != nil && len(parts) > 0 {
			w.skip(path.Join(parts...), "the directory cannot be read: "+errText(err))
			return nil
		}
		return err
	}
	for _, de := range des {
		name := de.Name()
		if name == ".git" {
			continue
		}
		sub := append(slices.Clip(parts), name)
		rel := path.Join(sub...)
		src := filepath.Join(dir, name)
		var fi fs.FileInfo
		if de.Type()&fs.ModeSymlink != 0 {
			var why string
			if src, fi, why, err = w.resolve(src, rel); err != nil {
				// A link the user ignores need not resolve, wherever
				// it points and whatever it would resolve to.
				if w.ignored(sub, false) || w.ignored(sub, true) {
					continue
				}
				if w.skip != nil {
					w.skip(rel, why)
					continue
				}
				return err
			}
		} else if fi, err = de.Info(); err != nil {
			if w.skip != nil {
				w.skip(rel, "cannot be read: "+errText(err))
				continue
			}
			return err
		}
		if w.ignored(sub, fi.IsDir()) {
			continue
		}
		switch {
		case fi.IsDir():
			if w.skip != nil {
				if why := pathProblem(rel); why != "" {
					w.skip(rel, "the directory's name "+why)
					continue
				}
			}
			if ancestors[src] {
				if w.skip != nil {
					w.skip(rel, "a symlink to one of its own parent directories (a loop)")
					continue
				}
				return fmt.Errorf("%w: symlink %s points to %s, one of its own parent directories (a loop); remove it or add it to .ferryignore", ErrUnsafePath, rel, src)
			}
			ancestors[src] = true
			err := w.walk(src, sub, ancestors)
			delete(ancestors, src)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := checkPath(rel); err != nil {
				if w.skip != nil {
					w.skip(rel, "the name "+pathProblem(rel))
					continue
				}
				return err
			}
			if len(w.entries) >= MaxFiles {
				if w.skip != nil {
					w.skip(rel, fmt.Sprintf("past the limit of %d files", MaxFiles))
					continue
				}
				return fmt.Errorf("more than %d files; add some to .ferryignore", MaxFiles)
			}
			w.entries = append(w.entries, newEntry(rel, src, fi))
		default:
			// A socket, FIFO or device is not part of a snapshot.
			if w.skip != nil {
				w.skip(rel, "not a regular file or directory ("+kindOf(fi.Mode())+")")
			}
		}
	}
	return nil
}

func (w *walker) ignored(parts []string, isDir bool) bool {
	return w.ignore != nil && w.ignore.Match(parts, isDir)
}

// resolve follows the symlink at src (snapshot path rel) and returns the
// real path of its target and the target's info. Targets outside the root
// are refused. On an error, why says in a few words what is wrong with the
// link, for a list of skipped entries.
func (w *walker) resolve(src, rel string) (string, fs.FileInfo, string, error) {
	target, err := os.Readlink(src)
	if err != nil {
		return "", nil, "the symlink cannot be read: " + errText(err), err
	}
	outsideWhy := fmt.Sprintf("a symlink to %s, outside the directory", target)
	outside := fmt.Errorf("%w: symlink %s -> %s points outside %s; remove it or add it to .ferryignore", ErrUnsafePath, rel, target, w.display)
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		// Say "outside" rather than "dangling" when that is what it is.
		lexical := target
		if !filepath.IsAbs(lexical) {
			lexical = filepath.Join(filepath.Dir(src), lexical)
		}
		if !w.inside(lexical) {
			return "", nil, outsideWhy, outside
		}
		why := fmt.Sprintf("a dangling symlink to %s", target)
		if !errors.Is(err, fs.ErrNotExist) {
			why = fmt.Sprintf("a symlink to %s that cannot be resolved: %s", target, errText(err))
		}
		return "", nil, why, fmt.Errorf("symlink %s -> %s: cannot resolve: %w", rel, target, err)
	}
	if !w.inside(real) {
		return "", nil, outsideWhy, outside
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, "the symlink's target cannot be read: " + errText(err), fmt.Errorf("symlink %s -> %s: %w", rel, target, err)
	}
	return real, fi, "", nil
}

// inside reports whether the absolute path p is the root or below it.
func (w *walker) inside(p string) bool {
	r, err := filepath.Rel(w.root, p)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// Include adds the files of other to t under the folder under ("" for
// t's root), as a component's additional_includes join its code. A path
// that both trees hold is an error naming it; so is a total over t's
// size limit.
func (t *Tree) Include(other *Tree, under string) error {
	have := make(map[string]bool, len(t.entries))
	for _, e := range t.entries {
		have[e.rel] = true
	}
	for _, e := range other.entries {
		if under != "" {
			e.rel = path.Join(under, e.rel)
		}
		if err := checkPath(e.rel); err != nil {
			return fmt.Errorf("snapshot %s: %w", other.display, err)
		}
		if have[e.rel] {
			return fmt.Errorf("snapshot %s: %s is in %s as well; rename one of them", other.display, e.rel, t.display)
		}
		have[e.rel] = true
		t.entries = append(t.entries, e)
	}
	t.key += "+" + other.key
	if other.stamp.Before(t.stamp) {
		t.stamp = other.stamp
	}
	return checkSize(t.display, t.entries, t.opt.MaxSize)
}

// Empty is a tree with no files, named display, to Include others in.
func Empty(display string, opt BuildOptions) *Tree {
	return &Tree{display: display, key: "empty:", opt: opt, stamp: opt.now()}
}
