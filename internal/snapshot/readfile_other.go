//go:build !linux

package snapshot

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/ferry-ml/ferry/internal/blob"
)

// readFileInto reads the file name into buf until buf is full or the file
// ends, and returns how much it read.
func readFileInto(name string, buf []byte) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := blob.ReadUpTo(f, buf)
	return int64(n), err
}

// openFile opens the file name to read it as a stream, and returns its
// size; a file that is no longer a regular file is an error.
func openFile(name string) (io.ReadCloser, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, &fs.PathError{Op: "open", Path: name, Err: errors.New("no longer a regular file")}
	}
	return f, fi.Size(), nil
}
