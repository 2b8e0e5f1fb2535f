package environment

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeWheel writes a wheel of the pure-Python package ferrytestpkg, whose
// VALUE is value, into dir. It is written by hand, as a wheel is a zip
// with a RECORD of hashes, so the tests need neither network nor
// setuptools/wheel.
func writeWheel(t *testing.T, dir, version string, value int) {
	t.Helper()
	dist := "ferrytestpkg-" + version + ".dist-info"
	files := [][2]string{
		{"ferrytestpkg/__init__.py", fmt.Sprintf("VALUE = %d\n", value)},
		{dist + "/METADATA", "Metadata-Version: 2.1\nName: ferrytestpkg\nVersion: " + version + "\n"},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: ferry-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", dist)
	files = append(files, [2]string{dist + "/RECORD", record.String()})

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ferrytestpkg-"+version+"-py3-none-any.whl"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// offlinePip points pip, through the variables a node would set, at a
// folder holding ferrytestpkg 1.0 (VALUE 42) and 2.0 (VALUE 43), and at
// nothing else.
func offlinePip(t *testing.T) {
	t.Helper()
	wheels := t.TempDir()
	writeWheel(t, wheels, "1.0", 42)
	writeWheel(t, wheels, "2.0", 43)
	t.Setenv("PIP_NO_INDEX", "1")
	t.Setenv("PIP_FIND_LINKS", wheels)
}

// fetcher serves an environment's files from memory and counts how often
// it was asked.
type fetcher struct {
	files map[string]string
	calls atomic.Int32
}

func (f *fetcher) fetch(dest string) error {
	f.calls.Add(1)
	for name, body := range f.files {
		if err := os.WriteFile(filepath.Join(dest, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// inEnv runs a shell command line with rt's environment, as a job would,
// so that PATH decides which python runs.
func inEnv(t *testing.T, rt *Runtime, line string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env = rt.Environ(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return strings.TrimSpace(string(out))
}

func prepare(t *testing.T, c *Cache, s *Spec, f *fetcher) (*Runtime, string) {
	t.Helper()
	var log bytes.Buffer
	rt, err := c.Prepare(context.Background(), s, f.fetch, &log)
	if err != nil {
		t.Fatalf("Prepare(%s): %v\nlog:\n%s", s.Describe(), err, log.String())
	}
	t.Cleanup(rt.Release)
	return rt, log.String()
}

func TestPythonBuildReuseAndRebuild(t *testing.T) {
	offlinePip(t)
	c := &Cache{Dir: t.TempDir()}
	s := &Spec{Kind: KindPython, Requirements: "requirements.txt", Context: "snap-1"}
	f := &fetcher{files: map[string]string{"requirements.txt": "ferrytestpkg==1.0\n"}}
	h := s.Hash()

	rt, log := prepare(t, c, s, f)
	prefix := filepath.Join(c.Dir, h, "env")
	want := &Runtime{
		Hash:        h,
		Prefix:      prefix,
		PathPrepend: []string{filepath.Join(prefix, "bin")},
		Vars:        []string{"VIRTUAL_ENV=" + prefix},
	}
	if diff := cmp.Diff(want, rt, cmpRuntime); diff != "" {
		t.Errorf("runtime (-want +got):\n%s", diff)
	}
	for _, line := range []string{"ferry: building environment " + h[:12] + " (python requirements.txt)", "pip install", "ferry: environment ready in "} {
		if !strings.Contains(log, line) {
			t.Errorf("log lacks %q:\n%s", line, log)
		}
	}
	if got := inEnv(t, rt, `python -c 'import ferrytestpkg, os, sys; print(ferrytestpkg.VALUE, sys.prefix == os.environ["VIRTUAL_ENV"])'`); got != "42 True" {
		t.Errorf("python in the environment printed %q, want 42 True", got)
	}
	rec, err := readRecord(filepath.Join(c.Dir, h))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != KindPython || rec.Builder != builderVenv || rec.Size <= 0 || rec.Description != s.Describe() || rec.Python == "" {
		t.Errorf("record = %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, h, contextName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the environment's files were left in the build: %v", err)
	}

	rt.Release()
	again, log := prepare(t, c, s, f)
	if !again.Reused || again.Prefix != prefix {
		t.Errorf("second Prepare: Reused %v, Prefix %q; want a reuse of %q", again.Reused, again.Prefix, prefix)
	}
	if !strings.Contains(log, "ferry: reusing environment "+h[:12]) || strings.Contains(log, "pip") {
		t.Errorf("second Prepare's log should say it reuses and run no pip:\n%s", log)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("files fetched %d times, want once", n)
	}

	// Other requirements are another snapshot, so another environment.
	s2 := &Spec{Kind: KindPython, Requirements: "requirements.txt", Context: "snap-2"}
	rt2, log := prepare(t, c, s2, &fetcher{files: map[string]string{"requirements.txt": "ferrytestpkg==2.0\n"}})
	if rt2.Reused || rt2.Hash == h || !strings.Contains(log, "building environment "+s2.Hash()[:12]) {
		t.Errorf("changed requirements: Reused %v, hash %s (first %s); log:\n%s", rt2.Reused, rt2.Hash, h, log)
	}
	if got := inEnv(t, rt2, `python -c 'import ferrytestpkg; print(ferrytestpkg.VALUE)'`); got != "43" {
		t.Errorf("python in the new environment printed %q, want 43", got)
	}
	if got := inEnv(t, again, `python -c 'import ferrytestpkg; print(ferrytestpkg.VALUE)'`); got != "42" {
		t.Errorf("python in the first environment printed %q, want 42", got)
	}
}

func TestPythonBuildFailureIsNotCached(t *testing.T) {
	offlinePip(t)
	c := &Cache{Dir: t.TempDir()}
	s := &Spec{Kind: KindPython, Requirements: "requirements.txt", Context: "snap-broken"}
	f := &fetcher{files: map[string]string{"requirements.txt": "nosuchpkg==9\n"}}
	for attempt := 1; attempt <= 2; attempt++ {
		var log bytes.Buffer
		rt, err := c.Prepare(context.Background(), s, f.fetch, &log)
		if !errors.Is(err, ErrBuild) {
			t.Fatalf("attempt %d: Prepare = %v, %v; want an error wrapping ErrBuild", attempt, rt, err)
		}
		if want := "pip install failed (exit status 1); its output is in the log above"; err.Error() != want {
			t.Errorf("attempt %d: error %q, want %q", attempt, err, want)
		}
		for _, line := range []string{"building environment " + s.Hash()[:12], "No matching distribution found for nosuchpkg==9"} {
			if !strings.Contains(log.String(), line) {
				t.Errorf("attempt %d: log lacks %q:\n%s", attempt, line, log.String())
			}
		}
		if _, err := os.Stat(filepath.Join(c.Dir, s.Hash())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("attempt %d: a failed build left its folder: %v", attempt, err)
		}
	}
}

func TestPythonVersionNotOnNode(t *testing.T) {
	t.Parallel()
	c := &Cache{Dir: t.TempDir()}
	s := &Spec{Kind: KindPython, Requirements: "requirements.txt", PythonVersion: "2.7", Context: "snap"}
	_, err := c.Prepare(context.Background(), s, (&fetcher{files: map[string]string{"requirements.txt": "\n"}}).fetch, nil)
	if !errors.Is(err, ErrBuild) {
		t.Fatalf("Prepare = %v, want an error wrapping ErrBuild", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "python_version 2.7: ") {
		t.Errorf("error %q should start with the version asked for", msg)
	}
	for _, p := range lookPathAll(os.Getenv("PATH"), "python3") {
		if !strings.Contains(msg, p+" (") {
			t.Errorf("error %q does not list %s, which is on PATH", msg, p)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dir, s.Hash())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed build left its folder: %v", err)
	}
}

// fakePythons makes folders of scripts that answer the version probe as
// pythons of those versions would, and a pyenv-style shim that fails.
func fakePythons(t *testing.T) (path string, dirs [3]string) {
	t.Helper()
	root := t.TempDir()
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprint("d", i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(dirs[0], "python3.10", "echo 3.10.4")
	write(dirs[1], "python3", "echo 3.9.1")
	write(dirs[1], "python3.8", "echo 'pyenv: python3.8: command not found' >&2; exit 127")
	write(dirs[2], "python3", "echo 3.12.0")
	// The same folder twice, through a link, as /bin and /usr/bin are:
	// its pythons are listed once.
	link := filepath.Join(root, "link")
	if err := os.Symlink(dirs[1], link); err != nil {
		t.Fatal(err)
	}
	return strings.Join([]string{dirs[0], dirs[1], link, "relative", dirs[2]}, string(filepath.ListSeparator)), dirs
}

func TestFindPython(t *testing.T) {
	t.Parallel()
	path, d := fakePythons(t)
	for _, tc := range []struct {
		version, want, err string
	}{
		{version: "", want: d[1] + "/python3"},
		{version: "3.10", want: d[0] + "/python3.10"},
		{version: "3.9", want: d[1] + "/python3"},
		{version: "3.12", want: d[2] + "/python3"},
		{version: "3.9.1", want: d[1] + "/python3"},
		{version: "3", want: d[1] + "/python3"},
		{version: "3.8", err: "no python on this node's PATH matches; found " + d[1] + "/python3.8 (did not run: pyenv: python3.8: command not found), " +
			d[1] + "/python3 (3.9.1), " + d[2] + "/python3 (3.12.0)"},
		{version: "2.7", err: "no python on this node's PATH matches; found " + d[1] + "/python3 (3.9.1), " + d[2] + "/python3 (3.12.0)"},
	} {
		want, err := pythonVersionConstraint(tc.version)
		if err != nil {
			t.Fatal(err)
		}
		py, err := findPython(context.Background(), path, want)
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("version %q: got %v, %v; want error %q", tc.version, py, err, tc.err)
			}
		case err != nil:
			t.Errorf("version %q: %v", tc.version, err)
		case py.Path != tc.want:
			t.Errorf("version %q: found %s, want %s", tc.version, py.Path, tc.want)
		}
	}
	if _, err := findPython(context.Background(), t.TempDir(), &pythonConstraint{}); err == nil || err.Error() != "this node has no python3 on its PATH" {
		t.Errorf("empty PATH: %v", err)
	}
}

// TestFindPythonOnThisNode asks the node's real PATH for the minor
// version of its python3 (3.11 on the test machines, where both
// /usr/bin/python3 3.11.2 and a pyenv 3.11.7 are on PATH).
func TestFindPythonOnThisNode(t *testing.T) {
	t.Parallel()
	host := hostPython(t)
	minor := versionString(host.Version[:2])
	want, err := pythonVersionConstraint(minor)
	if err != nil {
		t.Fatal(err)
	}
	py, err := findPython(context.Background(), os.Getenv("PATH"), want)
	if err != nil {
		t.Fatalf("python_version %s: %v", minor, err)
	}
	if got := versionString(py.Version[:2]); got != minor {
		t.Errorf("python_version %s found %s", minor, py)
	}
	if named := lookPathAll(os.Getenv("PATH"), "python"+minor); len(named) > 0 && filepath.Base(py.Path) != "python"+minor {
		t.Errorf("python_version %s found %s; %s is on PATH and comes first", minor, py.Path, named[0])
	}
}

func hostPython(t *testing.T) *interpreter {
	t.Helper()
	py, err := findPython(context.Background(), os.Getenv("PATH"), &pythonConstraint{})
	if err != nil {
		t.Fatalf("these tests need python3 on PATH: %v", err)
	}
	return py
}

func TestPythonVersionConstraint(t *testing.T) {
	t.Parallel()
	if _, err := pythonVersionConstraint("3.x"); !errors.Is(err, ErrBuild) || !strings.Contains(err.Error(), "python_version 3.x is not a version like 3.11") {
		t.Errorf("python_version 3.x: %v", err)
	}
}
