package imagereg

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RunnerRepo is the repository of the runner's image under a registry's
// prefix, and RunnerPath the binary's path in it.
const (
	RunnerRepo = "ferry-runner"
	RunnerPath = "/ferry"
)

// ErrNotStatic says the binary links a C library at run time, which the
// runner's image (nothing but the binary) does not have.
var ErrNotStatic = errors.New("the ferry binary is dynamically linked; the runner's image needs a static one (build it with CGO_ENABLED=0)")

// RunnerImage is the one-layer image holding the ferry binary at exe as
// RunnerPath, and the tag that names its content (the binary's SHA-256).
// The image has no shell and nothing else: its binary copies itself into
// a pod's volume (`ferry copy-self`), from where the job's own image runs
// it. It refuses a binary that is not statically linked.
func RunnerImage(exe string) (v1.Image, string, error) {
	data, tag, err := readRunner(exe)
	if err != nil {
		return nil, "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: RunnerPath[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return nil, "", err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, "", err
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	})
	if err != nil {
		return nil, "", err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{RunnerPath}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, "", err
	}
	return img, tag, nil
}

// RunnerTag is the tag RunnerImage gives the binary at exe, without
// making the image; it refuses a binary that is not statically linked.
func RunnerTag(exe string) (string, error) {
	_, tag, err := readRunner(exe)
	return tag, err
}

// readRunner reads the ferry binary at exe, refusing one that is not
// statically linked, and names its content (its SHA-256, hex).
func readRunner(exe string) ([]byte, string, error) {
	data, err := os.ReadFile(exe)
	if err != nil {
		return nil, "", fmt.Errorf("read the ferry binary: %w", err)
	}
	if err := static(data); err != nil {
		return nil, "", fmt.Errorf("%s: %w", exe, err)
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// static says whether an ELF executable needs no dynamic loader.
func static(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return ErrNotStatic
		}
	}
	return nil
}
