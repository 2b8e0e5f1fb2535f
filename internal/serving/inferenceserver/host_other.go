//go:build !unix

package inferenceserver

// socketFile: no replica is reached over a Unix socket here.
func socketFile(string) (dev, ino uint64, ok bool) { return 0, 0, false }
