package environment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cache is a node's built environments, under Dir: one folder per hash.
//
// Several runners (separate processes) share one Dir: a build happens
// under an exclusive flock on Dir/<hash>.lock, so the same environment is
// built once and the others wait for it, and an environment in use holds a
// shared flock on Dir/<hash>.use, which eviction must be able to take
// exclusively. A folder is a complete build only once its record file is
// in it: the record is written last, so a build that was killed leaves a
// folder without one, which the next Prepare removes and builds again.
// Methods are safe for concurrent use.
type Cache struct {
	Dir      string // made if missing; a relative one is taken from the working directory at Prepare
	MaxBytes int64  // evict least-recently-used environments above this total; 0 = no limit
	Images   Images // nil: this node has no container engine
	// Now is the clock for records and last use; nil = time.Now.
	Now func() time.Time
}

// Runtime is a prepared environment.
type Runtime struct {
	Hash        string
	Reused      bool     // true when no build was needed
	Image       string   // non-empty: run the job in a container of this image tag (ImageTag(hash)); "" = on the host
	Prefix      string   // the venv/conda prefix on the host; "" for none
	PathPrepend []string // folders to put first on PATH (on the host)
	Vars        []string // extra KEY=VALUE for the job (VIRTUAL_ENV, CONDA_PREFIX, ...)

	once    sync.Once
	release func()
}

// Environ returns base with PATH prefixed by PathPrepend and Vars set
// (overriding same-named entries of base).
func (r *Runtime) Environ(base []string) []string {
	if r == nil {
		return slices.Clone(base)
	}
	set := map[string]bool{}
	for _, kv := range r.Vars {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(r.Vars)+1)
	path, hasPath := "", false
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			// The last one wins, as it does for os/exec.
			path, hasPath = v, true
		case !set[k]:
			out = append(out, kv)
		}
	}
	if len(r.PathPrepend) > 0 {
		p := strings.Join(r.PathPrepend, string(filepath.ListSeparator))
		if path != "" {
			p += string(filepath.ListSeparator) + path
		}
		path, hasPath = p, true
	}
	if hasPath {
		out = append(out, "PATH="+path)
	}
	return append(out, r.Vars...)
}

// Release ends this use of the environment, after which it may be
// evicted. Safe to call twice and on nil.
func (r *Runtime) Release() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		if r.release != nil {
			r.release()
		}
	})
}

// Layout of a build folder, Dir/<hash>/.
const (
	recordName  = "ferry-environment.json" // written last: its presence marks a complete build
	prefixName  = "env"                    // the venv or conda prefix
	contextName = "context"                // the environment's files, during the build only
	shimsName   = "shims"                  // Dir/shims/<hash>/python for interpreter_path
)

// Builders, as records name them.
const (
	builderVenv  = "venv"
	builderImage = "image"
	// Otherwise the conda tool's name: micromamba, mamba, conda.
)

// record describes a complete build.
type record struct {
	Kind        string    `json:"kind"`
	Builder     string    `json:"builder"`
	Size        int64     `json:"size"` // bytes on disk of the folder, or of the image
	Created     time.Time `json:"created"`
	Description string    `json:"description"`
	Image       string    `json:"image,omitempty"`
	Python      string    `json:"python,omitempty"` // the interpreter a venv was made with
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) path(name string) string { return filepath.Join(c.Dir, name) }

// Prepare returns environment s ready to run on this node, building it
// first when this node has no complete build of s.Hash(). fetch writes
// the Context snapshot's files into dest; it is called only when a build
// needs them, at most once. Progress lines and the build tool's own output
// go to log as they come. The returned Runtime holds the environment in
// use until Release; an environment in use is never evicted.
//
// An error that says the environment cannot be built here (the tool
// failed, the node lacks what it needs, a file in the spec is wrong)
// wraps ErrBuild; one that says ctx ended wraps its cause.
func (c *Cache) Prepare(ctx context.Context, s *Spec, fetch func(dest string) error, log io.Writer) (*Runtime, error) {
	if log == nil {
		log = io.Discard
	}
	lw := logWriter{log}
	h := s.Hash()
	if c.Dir == "" {
		return nil, errors.New("environment cache: no folder set")
	}
	if !filepath.IsAbs(c.Dir) {
		// Venvs are not relocatable, and their prefix goes into the job's
		// variables: it must not depend on a working directory.
		abs, err := filepath.Abs(c.Dir)
		if err != nil {
			return nil, fmt.Errorf("environment cache: %w", err)
		}
		cc := *c
		cc.Dir = abs
		c = &cc
	}
	switch s.Kind {
	case KindUserManaged:
		return c.userManaged(s, h, lw)
	case KindPython, KindConda:
	case KindImage, KindBuild:
		if c.Images == nil {
			return nil, buildErr("environment %s: this node has no container engine (Docker), so it cannot run image environments", s.Describe())
		}
	default:
		return nil, fmt.Errorf("environment kind %q is not one this node knows", s.Kind)
	}
	start := c.now()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("environment cache: %w", err)
	}
	lock, err := lockFile(ctx, c.path(h+".lock"), func() {
		fmt.Fprintf(lw, "ferry: waiting for another job that is building environment %s (%s)\n", h[:12], s.Describe())
	})
	if err != nil {
		return nil, fmt.Errorf("environment %s: %w", h[:12], err)
	}
	rt, built, err := c.ensure(ctx, s, h, fetch, lw)
	if err == nil {
		// Taken before the build lock is let go, so that an eviction,
		// which needs the build lock, cannot slip in between.
		err = c.hold(rt)
	}
	lock.Close()
	if err != nil {
		return nil, err
	}
	if built {
		fmt.Fprintf(lw, "ferry: environment ready in %.1fs\n", c.now().Sub(start).Seconds())
		c.evict(ctx, h, lw)
	}
	return rt, nil
}

// ensure returns the complete build of s, building it when there is none.
// The caller holds its build lock. built reports whether it built.
func (c *Cache) ensure(ctx context.Context, s *Spec, h string, fetch func(string) error, log logWriter) (rt *Runtime, built bool, err error) {
	dir := c.path(h)
	rec, err := readRecord(dir)
	switch {
	case err == nil && c.intact(ctx, dir, rec):
		fmt.Fprintf(log, "ferry: reusing environment %s (%s)\n", h[:12], s.Describe())
		return rec.runtime(h, dir, true), false, nil
	case err == nil:
		fmt.Fprintf(log, "ferry: environment %s is no longer whole on this node (its prefix or image is gone); building it again\n", h[:12])
	case !errors.Is(err, errUnfinished):
		return nil, false, fmt.Errorf("environment %s: %w", h[:12], err)
	default:
		if _, err := os.Stat(dir); err == nil {
			fmt.Fprintf(log, "ferry: removing an unfinished build of environment %s (a build was interrupted)\n", h[:12])
		}
	}
	if err := removeBuild(dir); err != nil {
		return nil, false, fmt.Errorf("environment %s: %w", h[:12], err)
	}

	fmt.Fprintf(log, "ferry: building environment %s (%s)\n", h[:12], s.Describe())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("environment %s: %w", h[:12], err)
	}
	rec, err = c.build(ctx, s, h, dir, fetch, log)
	if err == nil {
		err = writeRecord(dir, rec)
		if err != nil && rec.Image != "" {
			c.Images.Remove(context.WithoutCancel(ctx), rec.Image) // not cached, so not kept
		}
	}
	if err != nil {
		// A failed build is not cached; a later Prepare tries again.
		os.RemoveAll(dir)
		return nil, false, err
	}
	return rec.runtime(h, dir, false), true, nil
}

// build makes environment s in dir.
func (c *Cache) build(ctx context.Context, s *Spec, h, dir string, fetch func(string) error, log logWriter) (*record, error) {
	rec := &record{Kind: s.Kind, Description: s.Describe()}
	var contextDir string
	if s.Kind != KindImage || s.CondaFile != "" {
		contextDir = filepath.Join(dir, contextName)
		if err := fetchContext(contextDir, fetch); err != nil {
			return nil, err
		}
		// The files were needed for the build only, and an image build has
		// copied what it needs into the image.
		defer os.RemoveAll(contextDir)
	}
	prefix := filepath.Join(dir, prefixName)
	var err error
	switch s.Kind {
	case KindPython:
		rec.Builder = builderVenv
		rec.Python, err = buildPython(ctx, s, contextDir, prefix, log)
	case KindConda:
		rec.Builder, rec.Python, err = buildConda(ctx, s, contextDir, dir, prefix, log)
	default:
		rec.Builder, rec.Image = builderImage, ImageTag(h)
		rec.Size, err = c.Images.Ensure(ctx, s, contextDir, rec.Image, log)
	}
	if err != nil {
		return nil, err
	}
	if rec.Builder != builderImage {
		os.RemoveAll(contextDir)
		if rec.Size, err = diskUsage(dir); err != nil {
			return nil, fmt.Errorf("environment %s: %w", h[:12], err)
		}
	}
	rec.Created = c.now()
	return rec, nil
}

func fetchContext(dest string, fetch func(string) error) error {
	if fetch == nil {
		return errors.New("the environment needs its files, but there is no way to fetch them")
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	if err := fetch(dest); err != nil {
		return fmt.Errorf("fetching the environment's files: %w", err)
	}
	return nil
}

// intact reports whether a complete build is still usable: someone may
// have deleted its prefix or removed its image from the engine.
func (c *Cache) intact(ctx context.Context, dir string, rec *record) bool {
	if rec.Builder == builderImage {
		return c.Images != nil && c.Images.Has(ctx, rec.Image)
	}
	fi, err := os.Stat(filepath.Join(dir, prefixName, "bin"))
	return err == nil && fi.IsDir()
}

func (r *record) runtime(h, dir string, reused bool) *Runtime {
	rt := &Runtime{Hash: h, Reused: reused}
	if r.Builder == builderImage {
		rt.Image = r.Image
		return rt
	}
	rt.Prefix = filepath.Join(dir, prefixName)
	rt.PathPrepend = []string{filepath.Join(rt.Prefix, "bin")}
	if r.Builder == builderVenv {
		rt.Vars = []string{"VIRTUAL_ENV=" + rt.Prefix}
	} else {
		rt.Vars = []string{"CONDA_PREFIX=" + rt.Prefix}
	}
	return rt
}

// hold marks rt's environment in use until rt is released, and records
// now as its last use, which orders eviction.
func (c *Cache) hold(rt *Runtime) error {
	p := c.path(rt.Hash + ".use")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("environment %s: %w", rt.Hash[:12], err)
	}
	// Only an eviction holds it exclusively, and only while holding the
	// build lock, which our caller holds: so this does not wait.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("environment %s: marking it in use: %w", rt.Hash[:12], err)
	}
	now := c.now()
	if err := os.Chtimes(p, now, now); err != nil {
		f.Close()
		return fmt.Errorf("environment %s: %w", rt.Hash[:12], err)
	}
	rt.release = func() { f.Close() }
	return nil
}

// errUnfinished says a folder holds no complete build: its record is
// missing (the build is under way, failed or was killed) or damaged.
var errUnfinished = errors.New("no complete build")

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errUnfinished
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Builder == "" {
		return nil, fmt.Errorf("%w: %s is damaged", errUnfinished, filepath.Join(dir, recordName))
	}
	return &r, nil
}

// removeBuild removes a build folder, its record first, so that a crash
// halfway leaves an unfinished build, which is removed later, rather than
// a complete one with files missing.
func removeBuild(dir string) error {
	if err := os.Remove(filepath.Join(dir, recordName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(dir)
}

// writeRecord writes rec into dir atomically: a reader sees the whole
// record or none.
func writeRecord(dir string, rec *record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+recordName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, recordName))
}

// diskUsage is the bytes on disk under dir, each hard-linked file once.
func diskUsage(dir string) (int64, error) {
	var n int64
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			n += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n, err
}

// userManaged is the node's own software, with interpreter_path as the
// job's python when it is set. There is nothing to build or lock.
func (c *Cache) userManaged(s *Spec, h string, log logWriter) (*Runtime, error) {
	rt := &Runtime{Hash: h, Reused: true}
	p := s.InterpreterPath
	if p == "" {
		// Silent: a job with no environment logs only what it prints.
		return rt, nil
	}
	if !filepath.IsAbs(p) {
		return nil, buildErr("environment.interpreter_path %s must be an absolute path", p)
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, buildErr("environment.interpreter_path %s does not exist on this node", p)
	case err != nil:
		return nil, buildErr("environment.interpreter_path: %v", err)
	case !fi.Mode().IsRegular() || syscall.Access(p, 1 /* X_OK */) != nil:
		return nil, buildErr("environment.interpreter_path %s is not an executable file on this node", p)
	}
	shims, err := c.shims(h, p)
	if err != nil {
		return nil, fmt.Errorf("environment.interpreter_path %s: %w", p, err)
	}
	rt.PathPrepend = []string{shims}
	fmt.Fprintf(log, "ferry: using this node's own software, with %s as python\n", p)
	return rt, nil
}

// shims returns Dir/shims/<h>, a folder in which python and python3 are
// links to interpreter, making it first when missing. It is made aside
// and renamed into place, so a runner never sees it half made.
func (c *Cache) shims(h, interpreter string) (string, error) {
	dir := filepath.Join(c.Dir, shimsName, h)
	ok := func() bool {
		for _, name := range []string{"python", "python3"} {
			if t, err := os.Readlink(filepath.Join(dir, name)); err != nil || t != interpreter {
				return false
			}
		}
		return true
	}
	if ok() {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"python", "python3"} {
		if err := os.Symlink(interpreter, filepath.Join(tmp, name)); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil && !ok() {
		return "", err
	}
	return dir, nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can end
// the wait; onWait is called once if it has to wait. A lock file that
// eviction removed while we waited on it is no lock: take the new one.
func lockFile(ctx context.Context, path string, onWait func()) (*os.File, error) {
	delay := 10 * time.Millisecond
	waited := false
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
				break
			}
			if !waited && onWait != nil {
				onWait()
			}
			waited = true
			select {
			case <-ctx.Done():
				f.Close()
				return nil, context.Cause(ctx)
			case <-time.After(delay):
			}
			delay = min(2*delay, 250*time.Millisecond)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if samePath(f, path) {
			return f, nil
		}
		f.Close()
	}
}

// tryLock takes an flock on path (how: LOCK_EX or LOCK_SH) if it can at
// once; ok is false when another holds it or it was replaced.
func tryLock(path string, how int) (f *os.File, ok bool) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB) != nil || !samePath(f, path) {
		f.Close()
		return nil, false
	}
	return f, true
}

func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// cached is a complete build, as eviction sees it.
type cached struct {
	hash     string
	rec      *record
	lastUsed time.Time
}

// evict removes least-recently-used environments, never keep nor one in
// use, while the complete builds take more than MaxBytes; and it removes
// builds a killed runner left unfinished. Failures go to log: the job
// that triggered it has its environment and goes on.
func (c *Cache) evict(ctx context.Context, keep string, log logWriter) {
	ents, err := os.ReadDir(c.Dir)
	if err != nil {
		fmt.Fprintf(log, "ferry: environment cache: %v\n", err)
		return
	}
	var all []cached
	var total int64
	for _, e := range ents {
		h := e.Name()
		if !e.IsDir() || !isHash(h) {
			continue
		}
		rec, err := readRecord(c.path(h))
		if err != nil {
			if h != keep {
				c.removeUnfinished(h, log)
			}
			continue
		}
		last := rec.Created
		if fi, err := os.Stat(c.path(h + ".use")); err == nil {
			last = fi.ModTime()
		}
		all = append(all, cached{h, rec, last})
		total += rec.Size
	}
	if c.MaxBytes <= 0 || total <= c.MaxBytes {
		return
	}
	slices.SortFunc(all, func(a, b cached) int {
		return cmp.Or(a.lastUsed.Compare(b.lastUsed), strings.Compare(a.hash, b.hash))
	})
	for _, e := range all {
		if total <= c.MaxBytes {
			break
		}
		if e.hash != keep && c.evictOne(ctx, e, log) {
			total -= e.rec.Size
		}
	}
	if total > c.MaxBytes {
		fmt.Fprintf(log, "ferry: the environment cache holds %s, above its limit of %s, because the environments left are in use\n",
			formatBytes(total), formatBytes(c.MaxBytes))
	}
}

// evictOne removes e unless it is in use or being built, and reports
// whether it did.
func (c *Cache) evictOne(ctx context.Context, e cached, log logWriter) bool {
	lockPath, usePath, dir := c.path(e.hash+".lock"), c.path(e.hash+".use"), c.path(e.hash)
	lock, ok := tryLock(lockPath, syscall.LOCK_EX)
	if !ok {
		return false // a runner is preparing it right now
	}
	defer lock.Close()
	use, ok := tryLock(usePath, syscall.LOCK_EX)
	if !ok {
		return false // a job is using it
	}
	defer use.Close()
	if _, err := readRecord(dir); err != nil {
		return errors.Is(err, errUnfinished) // another runner evicted it first
	}
	if e.rec.Image != "" && c.Images != nil {
		// An image someone already removed is evicted all the same.
		if err := c.Images.Remove(ctx, e.rec.Image); err != nil && c.Images.Has(ctx, e.rec.Image) {
			fmt.Fprintf(log, "ferry: could not evict environment %s: removing image %s: %v\n", e.hash[:12], e.rec.Image, err)
			return false
		}
	}
	if err := removeBuild(dir); err != nil {
		fmt.Fprintf(log, "ferry: evicting environment %s: %v\n", e.hash[:12], err)
	}
	// Removed while held: a runner waiting on these files notices they
	// are gone and locks new ones.
	os.Remove(usePath)
	os.Remove(lockPath)
	fmt.Fprintf(log, "ferry: evicted environment %s (%s, %s, last used %s) to keep the cache under %s\n",
		e.hash[:12], e.rec.Description, formatBytes(e.rec.Size), e.lastUsed.Format(time.DateTime), formatBytes(c.MaxBytes))
	return true
}

// removeUnfinished removes the folder of a build that a killed runner
// left without a record, unless a build of it is under way.
func (c *Cache) removeUnfinished(h string, log logWriter) {
	lock, ok := tryLock(c.path(h+".lock"), syscall.LOCK_EX)
	if !ok {
		return
	}
	defer lock.Close()
	if _, err := readRecord(c.path(h)); !errors.Is(err, errUnfinished) {
		return
	}
	if err := removeBuild(c.path(h)); err == nil {
		fmt.Fprintf(log, "ferry: removed an unfinished build of environment %s (a build was interrupted)\n", h[:12])
	}
}

func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

func formatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", f, "kMGT"[i-1])
}
