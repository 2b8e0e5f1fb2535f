package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// A snapshot stream carries a whole folder in one pass: every file as a
// record of its path, mode and size followed by its content, so that a
// folder of many tiny files costs one request and no per-file digests on
// the sending side (the receiver hashes what it gets). It is the body of
// POST /v1/snapshots/stream:
//
//	magic    "FRYSNAP" then a version byte (1)
//	record*  uvarint len(path) (> 0), path, uvarint mode, uvarint size,
//	         size bytes of content
//	end      uvarint 0
//
// Nothing may follow the end; a stream without it is truncated. Unlike a
// tar stream there is no 512-byte header per file: a record of a tiny file
// costs its path and a few bytes more.

// StreamMagic begins every snapshot stream; its last byte is the version.
const StreamMagic = "FRYSNAP\x01"

// StreamContentType is the media type of a snapshot stream.
const StreamContentType = "application/x-ferry-snapshot-stream"

// ErrInvalidStream is wrapped by every error StreamReader returns for a
// stream that breaks the format or the snapshot path rules; errors for a
// file or a total over a limit wrap ErrTooLarge instead, and errors reading
// the underlying reader are passed through, wrapped.
var ErrInvalidStream = errors.New("invalid snapshot stream")

// MaxStreamPathBytes bounds the paths of one stream in all, so that what a
// reader keeps of them (to refuse duplicates) stays within the 512 MiB a
// manifest's JSON may take.
const MaxStreamPathBytes = 256 << 20

// StreamLimits bound what a StreamReader accepts.
type StreamLimits struct {
	MaxFileSize  int64 // largest file (0: no limit)
	MaxTotalSize int64 // most content bytes in all (0: no limit)
	MaxFiles     int   // most files (0: MaxFiles)
}

// StreamReader reads a snapshot stream, checking each record as it comes:
// its path by the rules of Validate (no ".." or absolute path, valid
// UTF-8, no duplicates, no file that is also another's directory), its
// mode, and its size against the limits. It is for untrusted input.
type StreamReader struct {
	br      *bufio.Reader
	lim     StreamLimits
	started bool
	done    bool
	n       int   // records read
	total   int64 // content bytes declared so far
	paths   int64 // path bytes so far
	seen    map[string]bool
	body    recordBody
	path    []byte
}

// NewStreamReader returns a reader of the snapshot stream r.
func NewStreamReader(r io.Reader, lim StreamLimits) *StreamReader {
	if lim.MaxFiles <= 0 {
		lim.MaxFiles = MaxFiles
	}
	if lim.MaxFileSize <= 0 {
		lim.MaxFileSize = math.MaxInt64
	}
	if lim.MaxTotalSize <= 0 {
		lim.MaxTotalSize = math.MaxInt64
	}
	s := &StreamReader{br: bufio.NewReaderSize(r, 256<<10), lim: lim, seen: map[string]bool{}}
	s.body.s = s
	return s
}

// Next returns the next file (its Digest empty) and a reader of exactly
// its content, valid until the next call; content not read is skipped. At
// the end of a whole stream it returns io.EOF. Errors name the record.
func (s *StreamReader) Next() (File, io.Reader, error) {
	if s.done {
		return File{}, nil, io.EOF
	}
	if err := s.skipBody(); err != nil {
		return File{}, nil, err
	}
	if !s.started {
		var magic [len(StreamMagic)]byte
		if _, err := io.ReadFull(s.br, magic[:]); err != nil {
			return File{}, nil, s.fail("the stream ends before its header", err)
		}
		if string(magic[:]) != StreamMagic {
			return File{}, nil, fmt.Errorf("%w: it does not begin with %q (got %q): send a snapshot stream of version 1", ErrInvalidStream, StreamMagic, magic[:])
		}
		s.started = true
	}
	rec := s.n + 1
	plen, err := s.uvarint(rec, "path length")
	if err != nil {
		return File{}, nil, err
	}
	if plen == 0 {
		return File{}, nil, s.end()
	}
	if plen > MaxPathLen {
		return File{}, nil, fmt.Errorf("%w: record %d: its path is %d bytes long, over the limit of %d", ErrInvalidStream, rec, plen, MaxPathLen)
	}
	if s.paths += int64(plen); s.paths > MaxStreamPathBytes {
		return File{}, nil, fmt.Errorf("%w: record %d: the paths pass %d bytes in all", ErrTooLarge, rec, MaxStreamPathBytes)
	}
	if s.n >= s.lim.MaxFiles {
		return File{}, nil, fmt.Errorf("%w: record %d: more than %d files", ErrTooLarge, rec, s.lim.MaxFiles)
	}
	if cap(s.path) < int(plen) {
		s.path = make([]byte, plen)
	}
	s.path = s.path[:plen]
	if _, err := io.ReadFull(s.br, s.path); err != nil {
		return File{}, nil, s.fail(fmt.Sprintf("record %d: the stream ends inside its path", rec), err)
	}
	p := string(s.path)
	if why := pathProblem(p); why != "" {
		return File{}, nil, fmt.Errorf("%w: record %d: %w %q: %s", ErrInvalidStream, rec, ErrUnsafePath, DisplayPath(p), why)
	}
	if s.seen[p] {
		return File{}, nil, fmt.Errorf("%w: record %d: %w %q: sent more than once", ErrInvalidStream, rec, ErrUnsafePath, p)
	}
	mode, err := s.uvarint(rec, "mode")
	if err != nil {
		return File{}, nil, err
	}
	if mode&^0o777 != 0 {
		return File{}, nil, fmt.Errorf("%w: record %d %q: mode %#o has bits outside 0o777", ErrInvalidStream, rec, p, mode)
	}
	size, err := s.uvarint(rec, "size")
	if err != nil {
		return File{}, nil, err
	}
	if size > uint64(s.lim.MaxFileSize) {
		return File{}, nil, fmt.Errorf("%w: record %d %q: %d bytes, over the limit of %d for one file", ErrTooLarge, rec, p, size, s.lim.MaxFileSize)
	}
	if int64(size) > s.lim.MaxTotalSize-s.total {
		return File{}, nil, fmt.Errorf("%w: record %d %q: with its %d bytes the snapshot would pass its limit of %d", ErrTooLarge, rec, p, size, s.lim.MaxTotalSize)
	}
	s.total += int64(size)
	s.seen[p] = true
	s.n++
	s.body.left, s.body.rec, s.body.path = int64(size), rec, p
	return File{Path: p, Mode: uint32(mode), Size: int64(size)}, &s.body, nil
}

// end checks what may only be checked once every path is known, and that
// nothing follows the end.
func (s *StreamReader) end() error {
	for p := range s.seen {
		for i := range len(p) {
			if p[i] == '/' && s.seen[p[:i]] {
				return fmt.Errorf("%w: %w %q: is a file and also the directory of %q", ErrInvalidStream, ErrUnsafePath, p[:i], p)
			}
		}
	}
	if _, err := s.br.ReadByte(); err != io.EOF {
		if err != nil {
			return s.fail("after its end", err)
		}
		return fmt.Errorf("%w: data follows the end of the stream", ErrInvalidStream)
	}
	s.done = true
	return io.EOF
}

// Count returns how many records were read, and the content bytes they
// declared.
func (s *StreamReader) Count() (int, int64) { return s.n, s.total }

func (s *StreamReader) uvarint(rec int, what string) (uint64, error) {
	var v uint64
	for i := range binary.MaxVarintLen64 {
		b, err := s.br.ReadByte()
		if err != nil {
			return 0, s.fail(fmt.Sprintf("record %d: the stream ends before its %s (a stream ends with a record of path length 0)", rec, what), err)
		}
		if i == binary.MaxVarintLen64-1 && b > 1 {
			break
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if v > math.MaxInt64 {
				break
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: record %d: its %s is out of range", ErrInvalidStream, rec, what)
}

// fail makes the error of a read that failed: a stream that ends early is
// invalid; any other failure (the connection, a body limit) is the
// reader's, kept in the chain.
func (s *StreamReader) fail(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: %s: truncated", ErrInvalidStream, what)
	}
	return fmt.Errorf("snapshot stream: %s: %w", what, err)
}

// skipBody discards what is left of the last record's content.
func (s *StreamReader) skipBody() error {
	if s.body.left == 0 {
		return nil
	}
	_, err := io.Copy(io.Discard, &s.body)
	return err
}

// recordBody reads one record's content: exactly its size, and an error,
// not io.EOF, when the stream ends before it.
type recordBody struct {
	s    *StreamReader
	left int64
	rec  int
	path string
}

func (b *recordBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.s.br.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		return n, b.s.fail(fmt.Sprintf("record %d %q: the stream ends %d bytes before the end of its content", b.rec, b.path, b.left), io.ErrUnexpectedEOF)
	}
	if err != nil && err != io.EOF {
		return n, b.s.fail(fmt.Sprintf("record %d %q", b.rec, b.path), err)
	}
	return n, nil
}

// StreamWriter writes a snapshot stream. Close ends it; a stream not
// closed is refused by its reader as truncated.
type StreamWriter struct {
	w       *bufio.Writer
	started bool
	hdr     []byte
}

// NewStreamWriter returns a writer of a snapshot stream to w.
func NewStreamWriter(w io.Writer) *StreamWriter {
	return &StreamWriter{w: bufio.NewWriterSize(w, 256<<10)}
}

func (s *StreamWriter) header(f File) error {
	if why := pathProblem(f.Path); why != "" {
		return fmt.Errorf("snapshot stream: %w %q: %s", ErrUnsafePath, DisplayPath(f.Path), why)
	}
	if f.Size < 0 || f.Mode&^0o777 != 0 {
		return fmt.Errorf("snapshot stream: %q: size %d or mode %#o out of range", f.Path, f.Size, f.Mode)
	}
	h := s.hdr[:0]
	if !s.started {
		h = append(h, StreamMagic...)
		s.started = true
	}
	h = binary.AppendUvarint(h, uint64(len(f.Path)))
	h = append(h, f.Path...)
	h = binary.AppendUvarint(h, uint64(f.Mode))
	h = binary.AppendUvarint(h, uint64(f.Size))
	s.hdr = h
	_, err := s.w.Write(h)
	return err
}

// WriteData writes a file whose content is data (f.Size is taken from it).
func (s *StreamWriter) WriteData(f File, data []byte) error {
	f.Size = int64(len(data))
	if err := s.header(f); err != nil {
		return err
	}
	_, err := s.w.Write(data)
	return err
}

// WriteFrom writes a file of f.Size bytes read from r; it fails if r holds
// fewer (a file that shrank since its size was taken). Bytes past f.Size
// are not read.
func (s *StreamWriter) WriteFrom(f File, r io.Reader) error {
	if err := s.header(f); err != nil {
		return err
	}
	n, err := s.w.ReadFrom(io.LimitReader(r, f.Size))
	if err == nil && n < f.Size {
		err = fmt.Errorf("snapshot stream: %q: %d bytes read of %d (did it shrink while it was sent?)", f.Path, n, f.Size)
	}
	return err
}

// Close ends the stream and flushes it; it does not close the underlying
// writer.
func (s *StreamWriter) Close() error {
	h := s.hdr[:0]
	if !s.started {
		h = append(h, StreamMagic...)
		s.started = true
	}
	h = append(h, 0)
	if _, err := s.w.Write(h); err != nil {
		return err
	}
	return s.w.Flush()
}
