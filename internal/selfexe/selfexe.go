// Package selfexe keeps a stable copy of the running ferry binary.
//
// `go run ./cmd/ferry quickstart` runs a binary that Go deletes when the
// command ends, but the server it starts must outlive it and keep starting
// runners from some binary. So whoever starts long-lived ferry processes
// first installs a copy of itself, named by its content hash, and starts
// those from the copy.
package selfexe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies the running executable into dir (once per distinct
// binary) and returns the copy's path.
func Install(dir string) (string, error) {
	src, err := os.Open("/proc/self/exe") // still readable if the file was deleted
	if err != nil {
		exe, err2 := os.Executable()
		if err2 != nil {
			return "", fmt.Errorf("find own executable: %w", err)
		}
		if src, err = os.Open(exe); err != nil {
			return "", fmt.Errorf("open own executable: %w", err)
		}
	}
	defer src.Close()
	h := sha256.New()
	if _, err := io.Copy(h, src); err != nil {
		return "", fmt.Errorf("hash own executable: %w", err)
	}
	dst := filepath.Join(dir, "ferry-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return dst, WriteExecutable(src, dst)
}

// WriteExecutable writes what src holds to dest, mode 0755, through a
// temporary file beside dest, so that dest is never seen half written.
func WriteExecutable(src io.Reader, dest string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".ferry-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
