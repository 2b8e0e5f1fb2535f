// Package tailbuf keeps the end of what is written to it: the last bytes
// of a command's output, to quote in the error that says it failed.
package tailbuf

// Buffer keeps the last max bytes written to it (New). It is not safe for
// concurrent use.
type Buffer struct {
	buf []byte
	max int
	cut bool
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write keeps p's bytes, dropping the oldest beyond the buffer's size; it
// never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

// String is what is kept.
func (b *Buffer) String() string { return string(b.buf) }

// Cut says whether bytes were dropped from the start.
func (b *Buffer) Cut() bool { return b.cut }
