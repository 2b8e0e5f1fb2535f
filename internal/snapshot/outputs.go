package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-ml/ferry/internal/beneath"
)

// MaxSkippedListed is the most skipped entries BuildOutputs lists one by
// one; past it, it only counts them (a job that writes a million FIFOs
// must not make a million-line report).
const MaxSkippedListed = 1000

// Skipped is an entry of a directory that BuildOutputs left out of its
// snapshot, and why.
type Skipped struct {
	// Path is the entry's path relative to the directory, slash-separated;
	// a path that is not printable UTF-8 is written as a Go string literal
	// ("bad\xffname"), so that it can be shown and sent as JSON.
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// OutputOptions control BuildOutputs.
type OutputOptions struct {
	// MaxFileSize skips every file larger than it (0: no limit);
	// FileLimitName names that limit in the reason ("the limit of one
	// output snapshot").
	MaxFileSize   int64
	FileLimitName string
	// MaxSize is the most bytes the snapshot may hold in all (0: no limit;
	// negative: none at all, so only empty files are kept). Over it, the largest files are skipped until the rest fit, so that as
	// many files as possible are kept. SizeLimitName names that limit in
	// the reason ("the job's output quota").
	MaxSize       int64
	SizeLimitName string
}

// OutputBuild is what BuildOutputs made of a directory.
type OutputBuild struct {
	Manifest *Manifest
	// Files maps every digest of Manifest to a local file with that content.
	Files map[string]string
	// Data holds the content of some small files, read while they were
	// hashed, by digest: an upload sends it from memory instead of reading
	// the files again (and sends what was hashed, even if a file changed
	// since).
	Data map[string][]byte
	// Skipped lists the entries left out, at most MaxSkippedListed of them,
	// in the order found; SkippedMore counts those past that.
	Skipped     []Skipped
	SkippedMore int
}

// BuildOutputs makes the manifest of a job's output directory root, which
// the job wrote and nobody checked: unlike Build, an entry that cannot be
// part of a snapshot does not fail it. A symlink that leaves root or
// dangles, a symlink loop, a name that is not valid UTF-8 or holds a
// backslash, a socket, FIFO or device, an unreadable file or directory and
// a file over a size limit are each left out and listed with the reason;
// every other file is kept. Symlinks inside root are followed as in Build,
// so what they point to is kept. Sizes are those the file system reports
// before anything is read (a sparse file counts at its apparent size), so
// nothing over a limit is ever read. No ignore file is read.
//
// It fails only when root itself cannot be read.
func BuildOutputs(root string, opt OutputOptions) (*OutputBuild, error) {
	p, err := PlanOutputs(root, opt)
	if err != nil {
		return nil, err
	}
	return p.Build()
}

// OutputPlan is what PlanOutputs decided to upload of a directory: the
// files to send, with the sizes the walk found, and what it left out. No
// file has been read yet: WriteStream reads them as it sends them, and
// Build hashes them.
type OutputPlan struct {
	display string
	// root is the folder's absolute path, for OutputBuild.Files; open
	// opens it again, as the walk did, to read its files beneath it.
	root    string
	open    func() (*beneath.Dir, error)
	opt     OutputOptions
	entries []entry
	// Skipped and SkippedMore are as in OutputBuild: what the walk and the
	// limits left out.
	Skipped     []Skipped
	SkippedMore int
}

// PlanOutputs walks a job's output directory root as BuildOutputs does
// and decides what to upload, by the same rules and limits, on the sizes
// the file system reports; it reads no file. It fails only when root
// itself cannot be read. root itself is trusted (symlinks in its path are
// followed); nothing beneath it is: see PlanOutputsUnder.
func PlanOutputs(root string, opt OutputOptions) (*OutputPlan, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	return planOutputs(root, real, func() (*beneath.Dir, error) { return beneath.Open(real) }, opt)
}

// PlanOutputsUnder is PlanOutputs of the folder rel beneath base, where
// base is trusted and rel, like everything beneath it, may be changed by
// someone else while it is walked and read (a job of another account than
// the caller's): rel is resolved without following any symlink, so a
// link put in its place fails the plan rather than leading it elsewhere.
func PlanOutputsUnder(base, rel string, opt OutputOptions) (*OutputPlan, error) {
	display := filepath.Join(base, rel)
	real, err := filepath.EvalSymlinks(base)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", display, err)
	}
	open := func() (*beneath.Dir, error) { return beneath.OpenUnder(real, rel) }
	return planOutputs(display, filepath.Join(real, rel), open, opt)
}

// planOutputs plans the output folder that open opens, whose
// absolute, link-free path is real.
func planOutputs(display, real string, open func() (*beneath.Dir, error), opt OutputOptions) (*OutputPlan, error) {
	d, err := open()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", display, err)
	}
	defer d.Close()
	out := &OutputBuild{}
	w := outWalker{root: d, rootPath: real, skip: out.skip}
	if err := w.walk("", nil, map[string]bool{"": true}); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", display, err)
	}
	entries := out.overLimits(w.entries, opt)
	return &OutputPlan{display: display, root: real, open: open, opt: opt, entries: entries, Skipped: out.Skipped, SkippedMore: out.SkippedMore}, nil
}

// OutputSource is an output folder planned for an upload: an
// *OutputPlan, or a plan made and read by another process (a runner reads
// a job's outputs as the job's account). WriteStream may be called again
// after a failed upload, and sends the folder as it is then.
type OutputSource interface {
	// Len is how many files the plan sends.
	Len() int
	// WriteStream writes the folder's files to w as a snapshot stream.
	WriteStream(w io.Writer, progress func(int64)) (OutputSent, error)
	// Build hashes the files for an upload by digest (a server that
	// takes no stream).
	Build() (*OutputBuild, error)
}

var _ OutputSource = (*OutputPlan)(nil)

// Len returns how many files the plan sends.
func (p *OutputPlan) Len() int { return len(p.entries) }

// TotalSize returns the bytes the plan sends at most: the sum of the
// sizes the walk found (a file that grew since is sent cut to that size).
func (p *OutputPlan) TotalSize() int64 {
	var n int64
	for _, e := range p.entries {
		n += e.size
	}
	return n
}

// Build reads and hashes the plan's files into a manifest, as
// BuildOutputs: a file that cannot be read is left out with the reason,
// and one that grew since the walk is kept whole if the limits still
// allow. The plan is not changed.
func (p *OutputPlan) Build() (*OutputBuild, error) {
	out := &OutputBuild{Skipped: slices.Clone(p.Skipped), SkippedMore: p.SkippedMore}
	entries := slices.Clone(p.entries)
	d, err := p.open()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", p.display, err)
	}
	defer d.Close()
	files, errs, datas, _ := hashEach(entries, hashOptions{keep: true, open: func(rel string) (*os.File, error) {
		return d.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	}})
	var kept []entry
	var keptFiles []File
	out.Data = map[string][]byte{}
	for i, e := range entries {
		if errs[i] != nil {
			out.skip(e.rel, "cannot be read: "+errText(errs[i]))
			continue
		}
		kept = append(kept, e)
		keptFiles = append(keptFiles, files[i])
		if datas[i] != nil {
			out.Data[files[i].Digest] = datas[i]
		}
	}
	// A file may have grown between the walk and the read; what was read
	// is what is uploaded, so that is what must fit.
	if limited := out.overLimits(kept, p.opt); len(limited) != len(kept) {
		in := make(map[string]bool, len(limited))
		for _, e := range limited {
			in[e.rel] = true
		}
		keptFiles = slices.DeleteFunc(keptFiles, func(f File) bool { return !in[f.Path] })
		kept = limited
	}
	out.Files = make(map[string]string, len(kept))
	for i, f := range keptFiles {
		if _, ok := out.Files[f.Digest]; !ok {
			out.Files[f.Digest] = filepath.Join(p.root, kept[i].src)
		}
	}
	out.Manifest = &Manifest{Files: keptFiles}
	if out.Manifest.Files == nil {
		out.Manifest.Files = []File{}
	}
	slices.SortFunc(out.Manifest.Files, comparePath)
	if err := out.Manifest.Validate(); err != nil {
		// The walk admits only paths Validate accepts; this is a bug.
		return nil, fmt.Errorf("snapshot %s: %w", p.display, err)
	}
	return out, nil
}

// OutputSent is what OutputPlan.WriteStream sent, and what was left out:
// the plan's skipped entries and those found while reading.
type OutputSent struct {
	Files       int
	Bytes       int64
	Skipped     []Skipped
	SkippedMore int
}

func (o *OutputSent) skip(rel, why string) {
	if len(o.Skipped) >= MaxSkippedListed {
		o.SkippedMore++
		return
	}
	o.Skipped = append(o.Skipped, Skipped{Path: DisplayPath(rel), Reason: why})
}

// readWhole is the largest file WriteStream reads whole before it sends
// its record; a larger one is sent as it is read.
const readWhole = 1 << 20

// WriteStream reads the plan's files and writes them to w as a snapshot
// stream (see StreamWriter), ending it, and returns what it sent. Each
// file is sent with the size the walk found: one that grew since is cut
// to that size (its end was being written; a later upload gets it), and
// one that shrank, or that cannot be read (or was swapped for a symlink
// or something other than a regular file), is left out and listed with
// the reason. A file read whole (up to readWhole bytes) is checked before
// its record is written; a larger one that shrinks while it is sent fails
// the stream, which its reader then refuses as truncated. progress, if not
// nil, hears of every file's bytes once they are sent to w's buffer.
//
// Small files are read ahead, by a few goroutines, in runs of files,
// while the runs before them are written; they are sent in the plan's
// order.
func (p *OutputPlan) WriteStream(w io.Writer, progress func(int64)) (OutputSent, error) {
	sent := OutputSent{Skipped: slices.Clone(p.Skipped), SkippedMore: p.SkippedMore}
	d, err := p.open()
	if err != nil {
		return sent, fmt.Errorf("snapshot %s: %w", p.display, err)
	}
	defer d.Close()
	sw := NewStreamWriter(w)
	runs, stop := p.readAhead(d)
	defer stop()
	for run := range runs {
		<-run.done
		off := int64(0)
		for i := run.first; i < run.end; i++ {
			e := p.entries[i]
			f := File{Path: e.rel, Mode: e.mode, Size: e.size}
			k := i - run.first
			n := run.n[k]
			data := run.data[:0]
			if n != streamed {
				data = run.data[off : off+n]
				off += e.size // the room the file had, whatever was read
			}
			switch {
			case run.errs[k] != nil:
				sent.skip(e.rel, "cannot be read: "+errText(run.errs[k]))
				continue
			case n == streamed:
				skipped, err := sendLarge(sw, d, e, f)
				if err != nil {
					return sent, err
				}
				if skipped != "" {
					sent.skip(e.rel, skipped)
					continue
				}
			case n < e.size:
				sent.skip(e.rel, shrankWhy(e.size, n))
				continue
			default:
				if err := sw.WriteData(f, data); err != nil {
					return sent, err
				}
			}
			sent.Files++
			sent.Bytes += e.size
			if progress != nil {
				progress(e.size)
			}
		}
	}
	return sent, sw.Close()
}

// streamed marks, in a readRun, a file too large to read whole, which
// WriteStream reads as it sends it.
const streamed = -1

// readRun is a run of a plan's files read ahead: entries[first:end], each
// file's content at its offset in data (the sum of the sizes before it),
// how much was read of it (or streamed) and why it could not be.
type readRun struct {
	first, end int
	data       []byte
	n          []int64
	errs       []error
	done       chan struct{}
}

// Read-ahead bounds: a run holds at most runFiles files or runBytes bytes
// (one file may take it past that, up to readWhole), and at most runsAhead
// runs are read or waiting to be sent.
const (
	runFiles  = 256
	runBytes  = 1 << 20
	runsAhead = 4
)

// readAhead reads the plan's small files in runs, by a few goroutines, and
// returns the runs in order (each to be waited on: done) and a func that
// stops the reading; it must be called.
func (p *OutputPlan) readAhead(d *beneath.Dir) (<-chan *readRun, func()) {
	ordered := make(chan *readRun, runsAhead)
	work := make(chan *readRun, runsAhead)
	quit := make(chan struct{})
	go func() {
		defer close(ordered)
		defer close(work)
		for first := 0; first < len(p.entries); {
			select {
			case <-quit:
				return
			default:
			}
			run := &readRun{first: first, done: make(chan struct{})}
			var size int64
			for run.end = first; run.end < len(p.entries) && run.end-first < runFiles && size < runBytes; run.end++ {
				if e := p.entries[run.end]; e.size <= readWhole {
					size += e.size
				}
			}
			run.data = make([]byte, size)
			run.n = make([]int64, run.end-first)
			run.errs = make([]error, run.end-first)
			select {
			case ordered <- run:
			case <-quit:
				return
			}
			// The workers take every run, even once stopped, so this
			// waits at most for one of them to finish its run.
			work <- run
			first = run.end
		}
	}()
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 4) {
		wg.Go(func() {
			for run := range work {
				select {
				case <-quit:
				default:
					run.read(d, p.entries)
				}
				close(run.done)
			}
		})
	}
	var once sync.Once
	return ordered, func() {
		once.Do(func() { close(quit) })
		for range ordered {
		}
		wg.Wait()
	}
}

// read reads the run's small files into its data.
func (run *readRun) read(d *beneath.Dir, entries []entry) {
	off := int64(0)
	for i := run.first; i < run.end; i++ {
		e := entries[i]
		k := i - run.first
		if e.size > readWhole {
			run.n[k] = streamed
			continue
		}
		run.n[k], run.errs[k] = readFileInto(d, e.src, run.data[off:off+e.size])
		off += e.size
	}
}

// sendLarge sends a file too large to read whole as it reads it; it
// returns why the file was left out, if it was.
func sendLarge(sw *StreamWriter, d *beneath.Dir, e entry, f File) (string, error) {
	r, size, err := openFile(d, e.src)
	if err != nil {
		return "cannot be read: " + errText(err), nil
	}
	defer r.Close()
	if size < e.size {
		return shrankWhy(e.size, size), nil
	}
	return "", sw.WriteFrom(f, r)
}

func shrankWhy(was, now int64) string {
	return fmt.Sprintf("it changed while it was read: %s when listed, %s when read (upload it again once it is written)", humanSize(was), humanSize(now))
}

func (o *OutputBuild) skip(rel, why string) {
	if len(o.Skipped) >= MaxSkippedListed {
		o.SkippedMore++
		return
	}
	o.Skipped = append(o.Skipped, Skipped{Path: DisplayPath(rel), Reason: why})
}

// overLimits skips the entries over opt's limits and returns the rest, in
// their order: first each file over MaxFileSize, then, while the rest hold
// more than MaxSize, the largest.
func (o *OutputBuild) overLimits(entries []entry, opt OutputOptions) []entry {
	var total int64
	keep := make([]bool, len(entries))
	for i, e := range entries {
		if opt.MaxFileSize > 0 && e.size > opt.MaxFileSize {
			o.skip(e.rel, fmt.Sprintf("%s, over %s of %s", humanSize(e.size), orDefault(opt.FileLimitName, "the size limit of one file"), humanSize(opt.MaxFileSize)))
			continue
		}
		keep[i] = true
		total += e.size
	}
	if opt.MaxSize != 0 && total > max(opt.MaxSize, 0) {
		order := make([]int, 0, len(entries))
		for i := range entries {
			if keep[i] {
				order = append(order, i)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int {
			if c := cmp.Compare(entries[b].size, entries[a].size); c != 0 {
				return c
			}
			return strings.Compare(entries[a].rel, entries[b].rel)
		})
		for _, i := range order {
			if total <= max(opt.MaxSize, 0) {
				break
			}
			keep[i] = false
			total -= entries[i].size
			o.skip(entries[i].rel, fmt.Sprintf("%s; with it the outputs would pass %s of %s", humanSize(entries[i].size), orDefault(opt.SizeLimitName, "the size limit"), humanSize(max(opt.MaxSize, 0))))
		}
	}
	var kept []entry
	for i, e := range entries {
		if keep[i] {
			kept = append(kept, e)
		}
	}
	return kept
}

// DisplayPath returns p as it can be shown and sent as JSON: unchanged
// when it is printable UTF-8, else as a Go string literal.
func DisplayPath(p string) string {
	if utf8.ValidString(p) && !strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return p
	}
	return strconv.Quote(p)
}

// kindOf names the type of a file that is not regular and not a directory.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.String()
}

// errText is the part of a file system error worth showing: the cause
// without the path, which the caller names anyway.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
