package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
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
	out := &OutputBuild{}
	w := walker{root: real, display: root, skip: out.skip}
	if err := w.walk(real, nil, map[string]bool{real: true}); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	entries := out.overLimits(w.entries, opt)
	files, errs, datas := hashEach(entries, true)
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
	if limited := out.overLimits(kept, opt); len(limited) != len(kept) {
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
			out.Files[f.Digest] = kept[i].src
		}
	}
	out.Manifest = &Manifest{Files: keptFiles}
	if out.Manifest.Files == nil {
		out.Manifest.Files = []File{}
	}
	slices.SortFunc(out.Manifest.Files, comparePath)
	if err := out.Manifest.Validate(); err != nil {
		// The walk admits only paths Validate accepts; this is a bug.
		return nil, fmt.Errorf("snapshot %s: %w", root, err)
	}
	return out, nil
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
