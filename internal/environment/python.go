package environment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// logWriter hides what the log is from os/exec, so a build tool's output
// always goes through a pipe and log's own Write, even when log is an
// *os.File: whatever wraps the job's log (a tee, a line splitter) sees it,
// and a grandchild that outlives a canceled tool cannot keep writing into
// the job's log, because WaitDelay closes the pipe.
type logWriter struct{ io.Writer }

// buildError is a build failure: its message is the whole story, and it
// wraps ErrBuild so the runner can say the environment failed to build.
type buildError struct{ err error }

func (e *buildError) Error() string   { return e.err.Error() }
func (e *buildError) Unwrap() []error { return []error{ErrBuild, e.err} }

func buildErr(format string, args ...any) error {
	return &buildError{fmt.Errorf(format, args...)}
}

// runTool runs a build tool in its own process group with its output going
// to log, and kills the whole group when ctx ends: pip and conda start
// children of their own. what names the step in errors ("pip install").
func runTool(ctx context.Context, log logWriter, dir, what, name string, args ...string) error {
	fmt.Fprintf(log, "ferry: $ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return buildErr("%s failed (%v); its output is in the log above", what, exit)
	default:
		return buildErr("%s could not run: %v", what, err)
	}
}

// lookPathAll returns every executable file called name in the folders of
// path, in order, leaving out those that are the same file as one before
// (/bin/python3 when /bin links to /usr/bin).
func lookPathAll(path, name string) []string {
	var found []string
	seen := map[string]bool{}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			// A relative PATH entry would depend on the job's working
			// directory, which the build does not run in.
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		found = append(found, p)
	}
	return found
}

// interpreter is a python found on the node and what it reported.
type interpreter struct {
	Path    string // as found on PATH
	Version []int  // major, minor, micro
	// Executable is its sys.executable: the builds run this, because a
	// pyenv shim at Path would choose its python again, by the folder it
	// runs in and its variables, maybe differently.
	Executable string
}

func (p *interpreter) String() string {
	if p.Executable != p.Path {
		return fmt.Sprintf("python %s (%s, found as %s)", versionString(p.Version), p.Executable, p.Path)
	}
	return fmt.Sprintf("python %s (%s)", versionString(p.Version), p.Path)
}

func versionString(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ".")
}

// probePython asks the interpreter at path for its version and
// executable. A pyenv shim for a version it does not have is on PATH but
// fails here.
func probePython(ctx context.Context, path string) (*interpreter, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-c", "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3])); print(sys.executable)")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(errOut.String()), "\n")
		if msg == "" {
			msg = err.Error()
		}
		return nil, errors.New(msg)
	}
	version, exe, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	v, err := parseVersion(version)
	if err != nil || len(v) != 3 {
		return nil, fmt.Errorf("it printed %q as its version", out.String())
	}
	if exe = strings.TrimSpace(exe); !filepath.IsAbs(exe) {
		exe = path
	}
	return &interpreter{Path: path, Version: v, Executable: exe}, nil
}

// findPython finds on path a python that satisfies want: first
// python<major>.<minor> when want pins one, then every python3, in PATH
// order. Its error lists what it found.
func findPython(ctx context.Context, path string, want *pythonConstraint) (*interpreter, error) {
	var names []string
	if pin := want.pinnedMinor(); pin != "" {
		names = append(names, "python"+pin)
	}
	names = append(names, "python3")
	var found []string
	seen := map[string]bool{}
	for _, name := range names {
		for _, p := range lookPathAll(path, name) {
			if seen[p] {
				continue
			}
			seen[p] = true
			py, err := probePython(ctx, p)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				found = append(found, fmt.Sprintf("%s (did not run: %v)", p, err))
				continue
			}
			if want.match(py.Version) {
				return py, nil
			}
			found = append(found, fmt.Sprintf("%s (%s)", p, versionString(py.Version)))
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("this node has no %s on its PATH", strings.Join(names, " or "))
	}
	return nil, fmt.Errorf("no python on this node's PATH matches; found %s", strings.Join(found, ", "))
}

// pythonVersionConstraint reads a python_version: "3.11" means any 3.11.x.
func pythonVersionConstraint(v string) (*pythonConstraint, error) {
	if v == "" {
		return &pythonConstraint{}, nil
	}
	if _, err := parseVersion(v); err != nil {
		return nil, buildErr("python_version %s is not a version like 3.11: %v", v, err)
	}
	return parseConstraint("=" + v)
}

// contextFile is name inside the environment's files, refusing a name
// that would reach outside them: specs come over the network.
func contextFile(contextDir, name, field string) (string, error) {
	if name == "" || !filepath.IsLocal(name) {
		return "", buildErr("%s %q is not a file name inside the environment's files", field, name)
	}
	p := filepath.Join(contextDir, name)
	if _, err := os.Stat(p); err != nil {
		return "", buildErr("%s %s is not among the environment's files", field, name)
	}
	return p, nil
}

// buildPython makes the virtualenv of a KindPython spec at prefix.
func buildPython(ctx context.Context, s *Spec, contextDir, prefix string, log logWriter) (python string, err error) {
	reqs, err := contextFile(contextDir, s.Requirements, "requirements")
	if err != nil {
		return "", err
	}
	want, err := pythonVersionConstraint(s.PythonVersion)
	if err != nil {
		return "", err
	}
	py, err := findPython(ctx, os.Getenv("PATH"), want)
	if err != nil {
		if s.PythonVersion == "" {
			return "", buildErr("python: %v", err)
		}
		return "", buildErr("python_version %s: %v", s.PythonVersion, err)
	}
	if err := buildVenv(ctx, py, prefix, reqs, contextDir, log); err != nil {
		return "", err
	}
	return py.String(), nil
}

// buildVenv makes a virtualenv at prefix with py and pip-installs the
// requirements file reqs into it ("" for none). pip runs with the
// runner's environment unchanged, so the node's PIP_INDEX_URL,
// PIP_FIND_LINKS, PIP_NO_INDEX and pip.conf apply, and in dir, so that
// relative paths in the requirements file mean files beside it.
func buildVenv(ctx context.Context, py *interpreter, prefix, reqs, dir string, log logWriter) error {
	fmt.Fprintf(log, "ferry: using %s\n", py)
	if err := runTool(ctx, log, dir, "python -m venv", py.Executable, "-m", "venv", prefix); err != nil {
		return err
	}
	if reqs == "" {
		return nil
	}
	return runTool(ctx, log, dir, "pip install", filepath.Join(prefix, "bin", "python"),
		"-m", "pip", "install", "--no-input", "--disable-pip-version-check", "-r", reqs)
}
