// Package testutil finds the real components tests need (a Docker engine,
// the base image) and makes test fixtures that would otherwise need a
// network (Python wheels). A test that needs something this machine lacks
// is skipped with a message saying how to get it; CI provides everything,
// so CI skips nothing.
package testutil

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// skip skips the test, except under CI (CI=true), where .ci/run provides
// every component, so a missing one is a failure and not a silent skip.
func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and a component is missing: "+format, args...)
	}
	t.Skipf(format, args...)
}

// BaseImage is the small Debian image with python3 that
// scripts/make-base-image.sh makes without any registry.
const BaseImage = "ferry-base:bookworm"

// RequireDocker skips the test unless a Docker engine answers.
func RequireDocker(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c.Ping(ctx)
	}
	if err != nil {
		skip(t, "needs a running Docker engine (apt-get install docker.io, then start dockerd): %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// RequireBaseImage skips the test unless the engine has BaseImage.
func RequireBaseImage(t testing.TB) {
	t.Helper()
	c := RequireDocker(t)
	if _, err := c.ImageInspect(context.Background(), BaseImage); err != nil {
		skip(t, "needs the image %s: run scripts/make-base-image.sh (debootstrap, no registry needed)", BaseImage)
	}
}

// NodeImage is the docker node provider's image, with python3-torch, that
// scripts/make-node-image.sh makes from BaseImage.
const NodeImage = "ferry-node:bookworm"

// RequireNodeImage skips the test unless the engine has NodeImage.
func RequireNodeImage(t testing.TB) {
	t.Helper()
	c := RequireDocker(t)
	if _, err := c.ImageInspect(context.Background(), NodeImage); err != nil {
		skip(t, "needs the image %s: run scripts/make-node-image.sh (no registry needed)", NodeImage)
	}
}

// MakeWheel is WriteWheel for tests: it fails the test on an error.
func MakeWheel(t testing.TB, dir, name, version string, files map[string]string) string {
	t.Helper()
	p, err := WriteWheel(dir, name, version, files)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteWheel writes a pure-Python wheel of package name at version into
// dir, with the given module files (path inside the wheel -> content), and
// returns its path. Wheels are zip files with a small metadata folder, so
// tests and benchmarks make them with no index and no build tools.
func WriteWheel(dir, name, version string, files map[string]string) (string, error) {
	dist := strings.ReplaceAll(name, "-", "_")
	info := fmt.Sprintf("%s-%s.dist-info", dist, version)
	all := map[string]string{
		info + "/METADATA": fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version),
		info + "/WHEEL":    "Wheel-Version: 1.0\nGenerator: ferry-testutil\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	maps.Copy(all, files)
	var record strings.Builder
	for _, p := range slices.Sorted(maps.Keys(all)) {
		sum := sha256.Sum256([]byte(all[p]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(all[p]))
	}
	record.WriteString(info + "/RECORD,,\n")
	all[info+"/RECORD"] = record.String()

	path := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, p := range slices.Sorted(maps.Keys(all)) {
		w, err := zw.Create(p)
		if err != nil {
			return "", err
		}
		if _, err := w.Write([]byte(all[p])); err != nil {
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// RequirePython skips the test unless python3 with the venv module runs.
func RequirePython(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(p, "-c", "import venv, ensurepip").Run()
	}
	if err != nil {
		skip(t, "needs python3 with venv and ensurepip (apt-get install python3-venv): %v", err)
	}
	return p
}

// RequireDebianPython returns Debian's /usr/bin/python3, skipping the
// test unless it imports module: Debian's Python packages (pkg) are seen
// by that interpreter only, not by a python3 earlier on PATH.
func RequireDebianPython(t testing.TB, module, pkg string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import "+module).Run(); err != nil {
		skip(t, "needs %s with %s (apt-get install %s, or run scripts/test-setup.sh): %v", py, module, pkg, err)
	}
	return py
}

// RequireRoot skips the test unless it runs as root: it starts processes
// as another account or makes files for one. CI runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "needs root (run the tests as root, as CI does): it starts jobs as another account")
	}
}

// BuildFerry builds the ferry binary at path, for tests that start
// servers, agents or runners: a test binary cannot stand in for it, since
// servers start their runners and agents from a copy of their own
// executable. The compiler's output is in the error.
func BuildFerry(path string) error {
	// Static: a kubernetes compute with a registry ships
	// this very binary to its pods in an image with no C library.
	cmd := exec.Command("go", "build", "-o", path, "github.com/ferry-ml/ferry/cmd/ferry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building ferry: %v\n%s", err, out)
	}
	return nil
}
