//go:build !linux

package blob

import "syscall"

// syncFS makes everything written to the file systems durable; without
// syncfs(2), sync(2) is the one call that does it.
func syncFS(string) error {
	syscall.Sync()
	return nil
}
