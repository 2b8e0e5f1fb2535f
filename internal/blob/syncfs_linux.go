package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS makes everything written to the file system that holds dir
// durable: one syncfs(2) instead of an fsync of every file and folder.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}
