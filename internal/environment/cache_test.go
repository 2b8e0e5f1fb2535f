package environment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var cmpRuntime = cmpopts.IgnoreUnexported(Runtime{})

// The test binary doubles as a runner process for the tests of locking
// across processes: with these variables set it prepares one environment,
// writing the log to stdout, and exits.
const (
	helperEnv      = "FERRY_ENVIRONMENT_TEST_HELPER" // the cache's Dir
	helperSpecEnv  = "FERRY_ENVIRONMENT_TEST_SPEC"   // the Spec, as JSON
	helperFilesEnv = "FERRY_ENVIRONMENT_TEST_FILES"  // the environment's files, as a JSON map
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperPrepare(dir))
	}
	os.Exit(m.Run())
}

func helperPrepare(dir string) int {
	var s Spec
	f := &fetcher{}
	if err := json.Unmarshal([]byte(os.Getenv(helperSpecEnv)), &s); err != nil {
		fmt.Println("helper:", err)
		return 2
	}
	if err := json.Unmarshal([]byte(os.Getenv(helperFilesEnv)), &f.files); err != nil {
		fmt.Println("helper:", err)
		return 2
	}
	// The log is this process's stdout, an *os.File, as a runner's may be.
	rt, err := (&Cache{Dir: dir}).Prepare(context.Background(), &s, f.fetch, os.Stdout)
	if err != nil {
		fmt.Println("helper: Prepare:", err)
		return 1
	}
	defer rt.Release()
	fmt.Printf("helper: prefix=%s reused=%v\n", rt.Prefix, rt.Reused)
	return 0
}

// TestPrepareBuildsOnceAcrossRunners starts two runner processes and two
// runners in this process, each with its own Cache on one Dir, on the
// same unbuilt environment at once: one builds it, the others wait for it
// and reuse it.
func TestPrepareBuildsOnceAcrossRunners(t *testing.T) {
	offlinePip(t)
	dir := t.TempDir()
	s := &Spec{Kind: KindPython, Requirements: "requirements.txt", Context: "snap-shared"}
	files := map[string]string{"requirements.txt": "ferrytestpkg==1.0\n"}
	specJSON, _ := json.Marshal(s)
	filesJSON, _ := json.Marshal(files)

	logs := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperSpecEnv+"="+string(specJSON), helperFilesEnv+"="+string(filesJSON))
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			logs[i], errs[i] = string(out), err
		})
	}
	rts := make([]*Runtime, 2)
	for i := range 2 {
		wg.Go(func() {
			var log bytes.Buffer
			rts[i], errs[2+i] = (&Cache{Dir: dir}).Prepare(context.Background(), s, (&fetcher{files: files}).fetch, &log)
			logs[2+i] = log.String()
		})
	}
	wg.Wait()

	builds := 0
	for i, log := range logs {
		if errs[i] != nil {
			t.Fatalf("runner %d: %v\n%s", i, errs[i], log)
		}
		switch {
		case strings.Contains(log, "ferry: building environment "+s.Hash()[:12]):
			builds++
		case !strings.Contains(log, "ferry: reusing environment "+s.Hash()[:12]):
			t.Errorf("runner %d neither built nor reused:\n%s", i, log)
		}
	}
	if builds != 1 {
		t.Errorf("%d runners built the environment, want 1; logs:\n%s", builds, strings.Join(logs, "\n----\n"))
	}
	for _, rt := range rts {
		if got := inEnv(t, rt, `python -c 'import ferrytestpkg; print(ferrytestpkg.VALUE)'`); got != "42" {
			t.Errorf("python printed %q, want 42", got)
		}
		rt.Release()
	}
}

// fakeImages is a container engine in memory, an Images we own: the
// cache's bookkeeping of image environments is tested without Docker.
type fakeImages struct {
	mu       sync.Mutex
	size     int64
	have     map[string]bool
	ensured  []string            // tags
	contexts []map[string]string // the files Ensure found in contextDir; nil for none
	removed  []string
	fail     bool
}

var _ Images = (*fakeImages)(nil)

func newFakeImages(size int64) *fakeImages { return &fakeImages{size: size, have: map[string]bool{}} }

func (f *fakeImages) Ensure(ctx context.Context, s *Spec, contextDir, tag string, log io.Writer) (int64, error) {
	var files map[string]string
	if contextDir != "" {
		files = map[string]string{}
		err := filepath.WalkDir(contextDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			files[strings.TrimPrefix(p, contextDir+"/")] = string(b)
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, tag)
	f.contexts = append(f.contexts, files)
	fmt.Fprintf(log, "fake engine: making %s from %s\n", tag, s.Describe())
	if f.fail {
		return 0, fmt.Errorf("%w: fake engine: the build failed", ErrBuild)
	}
	f.have[tag] = true
	return f.size, nil
}

func (f *fakeImages) Has(ctx context.Context, tag string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.have[tag]
}

func (f *fakeImages) Remove(ctx context.Context, tag string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.have[tag] {
		return fmt.Errorf("fake engine: no image %s", tag)
	}
	delete(f.have, tag)
	f.removed = append(f.removed, tag)
	return nil
}

func (f *fakeImages) calls() (ensured, removed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ensured), slices.Clone(f.removed)
}

func imageSpec(name string) *Spec { return &Spec{Kind: KindImage, Image: name} }

// testClock is a clock that moves a minute at every reading, so that the
// order of last uses is plain without sleeping.
func testClock() func() time.Time {
	var n atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { return start.Add(time.Duration(n.Add(1)) * time.Minute) }
}

func TestImageEnvironments(t *testing.T) {
	t.Parallel()
	imgs := newFakeImages(1000)
	c := &Cache{Dir: t.TempDir(), Images: imgs}

	// A named image needs no files.
	s := imageSpec("python:3.11")
	f := &fetcher{}
	rt, log := prepare(t, c, s, f)
	want := &Runtime{Hash: s.Hash(), Image: ImageTag(s.Hash())}
	if diff := cmp.Diff(want, rt, cmpRuntime); diff != "" {
		t.Errorf("runtime (-want +got):\n%s", diff)
	}
	if !strings.Contains(log, "fake engine: making") || f.calls.Load() != 0 {
		t.Errorf("fetched %d times; log:\n%s", f.calls.Load(), log)
	}
	rec, err := readRecord(c.path(s.Hash()))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Size != 1000 || rec.Image != ImageTag(s.Hash()) || rec.Kind != KindImage {
		t.Errorf("record = %+v", rec)
	}
	rt, log = prepare(t, c, s, f)
	if !rt.Reused || strings.Contains(log, "fake engine") {
		t.Errorf("second Prepare: Reused %v; log:\n%s", rt.Reused, log)
	}

	// An image someone removed from the engine is made again.
	imgs.mu.Lock()
	delete(imgs.have, ImageTag(s.Hash()))
	imgs.mu.Unlock()
	rt, log = prepare(t, c, s, f)
	if rt.Reused || !strings.Contains(log, "no longer whole") {
		t.Errorf("after the image was removed: Reused %v; log:\n%s", rt.Reused, log)
	}

	// A build context and an image with a conda file get their files,
	// which are gone from the cache afterwards.
	b := &Spec{Kind: KindBuild, DockerfilePath: "docker/Dockerfile", Context: "snap-docker"}
	cond := &Spec{Kind: KindImage, Image: "ubuntu", CondaFile: "env.yml", Context: "snap-conda"}
	prepare(t, c, b, &fetcher{files: map[string]string{"Dockerfile": "FROM scratch\n"}})
	prepare(t, c, cond, &fetcher{files: map[string]string{"env.yml": "dependencies: [numpy]\n"}})
	imgs.mu.Lock()
	contexts := imgs.contexts
	imgs.mu.Unlock()
	wantContexts := []map[string]string{nil, nil, {"Dockerfile": "FROM scratch\n"}, {"env.yml": "dependencies: [numpy]\n"}}
	if diff := cmp.Diff(wantContexts, contexts); diff != "" {
		t.Errorf("files given to Ensure (-want +got):\n%s", diff)
	}
	for _, s := range []*Spec{b, cond} {
		if _, err := os.Stat(filepath.Join(c.path(s.Hash()), contextName)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: files left after the build: %v", s.Describe(), err)
		}
	}
}

func TestImageEnvironmentFailures(t *testing.T) {
	t.Parallel()
	s := imageSpec("python:3.11")

	_, err := (&Cache{Dir: t.TempDir()}).Prepare(context.Background(), s, nil, nil)
	if want := "environment image python:3.11: this node has no container engine (Docker), so it cannot run image environments"; err == nil || err.Error() != want || !errors.Is(err, ErrBuild) {
		t.Errorf("no engine: %v; want %q wrapping ErrBuild", err, want)
	}

	imgs := newFakeImages(10)
	imgs.fail = true
	c := &Cache{Dir: t.TempDir(), Images: imgs}
	var log bytes.Buffer
	if _, err := c.Prepare(context.Background(), s, nil, &log); !errors.Is(err, ErrBuild) {
		t.Errorf("failed engine: %v, want ErrBuild", err)
	}
	if _, err := os.Stat(c.path(s.Hash())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed build left its folder: %v", err)
	}

	b := &Spec{Kind: KindBuild, DockerfilePath: "Dockerfile", Context: "snap"}
	_, err = c.Prepare(context.Background(), b, func(string) error { return errors.New("server gone") }, nil)
	if err == nil || err.Error() != "fetching the environment's files: server gone" || errors.Is(err, ErrBuild) {
		t.Errorf("failed fetch: %v", err)
	}

	_, err = (&Cache{Images: imgs}).Prepare(context.Background(), s, nil, nil)
	if err == nil || err.Error() != "environment cache: no folder set" {
		t.Errorf("no Dir: %v", err)
	}

	_, err = c.Prepare(context.Background(), &Spec{Kind: "wasm"}, nil, nil)
	if err == nil || err.Error() != `environment kind "wasm" is not one this node knows` {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestUnfinishedBuildIsRemoved plays a runner killed in the middle of a
// build: its folder has no record. The next Prepare builds it again, and
// an eviction pass removes other such folders.
func TestUnfinishedBuildIsRemoved(t *testing.T) {
	t.Parallel()
	c := &Cache{Dir: t.TempDir(), Images: newFakeImages(10)}
	s, other := imageSpec("a"), imageSpec("b")
	for _, s := range []*Spec{s, other} {
		if err := os.MkdirAll(filepath.Join(c.path(s.Hash()), contextName), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt, log := prepare(t, c, s, &fetcher{})
	if rt.Reused || !strings.Contains(log, "ferry: removing an unfinished build of environment "+s.Hash()[:12]) {
		t.Errorf("Reused %v; log:\n%s", rt.Reused, log)
	}
	if !strings.Contains(log, "ferry: removed an unfinished build of environment "+other.Hash()[:12]) {
		t.Errorf("the other unfinished build was not removed; log:\n%s", log)
	}
	if _, err := os.Stat(c.path(other.Hash())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unfinished build left: %v", err)
	}
}

func TestPrepareWaitsForTheBuildLock(t *testing.T) {
	t.Parallel()
	imgs := newFakeImages(10)
	c := &Cache{Dir: t.TempDir(), Images: imgs}
	s := imageSpec("a")
	// Another runner is building s.
	other, err := lockFile(context.Background(), c.path(s.Hash()+".lock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var log bytes.Buffer
	if _, err := c.Prepare(ctx, s, nil, &log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Prepare while another builds, until ctx ends: %v", err)
	}
	if want := "ferry: waiting for another job that is building environment " + s.Hash()[:12] + " (image a)\n"; log.String() != want {
		t.Errorf("log %q, want %q", log.String(), want)
	}
	other.Close()
	// The lock is free now, but the next Prepare may still find it held
	// for a moment and wait: a process another test forks in parallel
	// holds a copy of every open file, the lock's too, until it execs.
	// What matters is that it builds once the other runner let go.
	if rt, log := prepare(t, c, s, &fetcher{}); rt.Reused || !strings.Contains(log, "ferry: building environment "+s.Hash()[:12]) {
		t.Errorf("after the other runner let go: Reused %v; log:\n%s", rt.Reused, log)
	}
	if ensured, _ := imgs.calls(); len(ensured) != 1 {
		t.Errorf("Ensure called %d times, want once", len(ensured))
	}
}

// TestEviction: above MaxBytes the least recently used environment goes,
// never one a runner holds (here another Cache, as another process), nor
// the one just built.
func TestEviction(t *testing.T) {
	// Not parallel: eviction tells "in use" by a failed non-blocking
	// flock, and a child that another test forks holds every open file
	// of this process, locks too, until it execs. Run beside tests that
	// start processes, an eviction here would find an idle environment
	// busy now and then and keep it (harmless in a runner: it only keeps
	// an environment a little longer; fatal to these exact expectations).
	dir := t.TempDir()
	imgs := newFakeImages(100)
	clock := testClock()
	holder := &Cache{Dir: dir, MaxBytes: 250, Images: imgs, Now: clock}
	c := &Cache{Dir: dir, MaxBytes: 250, Images: imgs, Now: clock}
	tag := func(name string) string { return ImageTag(imageSpec(name).Hash()) }
	removed := func(want ...string) {
		t.Helper()
		_, got := imgs.calls()
		var tags []string
		for _, name := range want {
			tags = append(tags, tag(name))
		}
		if diff := cmp.Diff(tags, got); diff != "" {
			t.Errorf("images removed (-want +got):\n%s", diff)
		}
	}

	a, _ := prepare(t, holder, imageSpec("a"), &fetcher{}) // in use throughout
	b, _ := prepare(t, c, imageSpec("b"), &fetcher{})
	b.Release()
	removed()
	cc, log := prepare(t, c, imageSpec("c"), &fetcher{}) // 300 > 250: b goes, a is in use
	cc.Release()
	removed("b")
	if !strings.Contains(log, "ferry: evicted environment "+imageSpec("b").Hash()[:12]+" (image b, 100 B, last used 2026-01-01 00:") {
		t.Errorf("log does not report the eviction:\n%s", log)
	}
	d, _ := prepare(t, c, imageSpec("d"), &fetcher{})
	d.Release()
	removed("b", "c")

	// Below one environment's size: everything but a (in use) and e (just
	// built) goes, and the log says why the cache stays above its limit.
	small := &Cache{Dir: dir, MaxBytes: 50, Images: imgs, Now: clock}
	e, log := prepare(t, small, imageSpec("e"), &fetcher{})
	e.Release()
	removed("b", "c", "d")
	if !strings.Contains(log, "ferry: the environment cache holds 200 B, above its limit of 50 B, because the environments left are in use") {
		t.Errorf("log:\n%s", log)
	}
	a.Release()
	prepare(t, small, imageSpec("f"), &fetcher{})
	removed("b", "c", "d", "a", "e")

	var left []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		left = append(left, e.Name())
	}
	h := imageSpec("f").Hash()
	if diff := cmp.Diff([]string{h, h + ".lock", h + ".use"}, left); diff != "" {
		t.Errorf("cache folder (-want +got):\n%s", diff)
	}
}

// TestEvictionFollowsLastUse: a reuse makes an environment recent again.
func TestEvictionFollowsLastUse(t *testing.T) {
	// Not parallel, as TestEviction.
	imgs := newFakeImages(100)
	c := &Cache{Dir: t.TempDir(), MaxBytes: 250, Images: imgs, Now: testClock()}
	for _, name := range []string{"x", "y", "x", "z"} {
		rt, _ := prepare(t, c, imageSpec(name), &fetcher{})
		rt.Release()
	}
	if _, removed := imgs.calls(); !slices.Equal(removed, []string{ImageTag(imageSpec("y").Hash())}) {
		t.Errorf("removed %v, want y's image only", removed)
	}
}

func TestUserManaged(t *testing.T) {
	t.Parallel()
	c := &Cache{Dir: t.TempDir()}

	var log bytes.Buffer
	rt, err := c.Prepare(context.Background(), &Spec{Kind: KindUserManaged}, nil, &log)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Runtime{Hash: (&Spec{Kind: KindUserManaged}).Hash(), Reused: true}, rt, cmpRuntime); diff != "" {
		t.Errorf("runtime (-want +got):\n%s", diff)
	}
	if ents, _ := os.ReadDir(c.Dir); len(ents) != 0 {
		t.Errorf("user_managed wrote into the cache: %v", ents)
	}

	// A fake interpreter shows which program `python` and `python3` run.
	fake := filepath.Join(t.TempDir(), "my-python")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"my-python $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Spec{Kind: KindUserManaged, InterpreterPath: fake}
	for range 2 { // the second time finds the shims made
		rt, log := prepare(t, c, s, nil)
		if got := inEnv(t, rt, "python -c 1; python3 -V"); got != "my-python -c 1\nmy-python -V" {
			t.Errorf("python on the environment's PATH printed %q; log:\n%s", got, log)
		}
	}

	// The real one: sys.executable is the shim, which is the interpreter.
	host := hostPython(t)
	real, err := filepath.EvalSymlinks(inEnv(t, nil, host.Path+` -c 'import sys; print(sys.executable)'`))
	if err != nil {
		t.Fatal(err)
	}
	rt, _ = prepare(t, c, &Spec{Kind: KindUserManaged, InterpreterPath: real}, nil)
	got := inEnv(t, rt, `python -c 'import sys; print(sys.executable)'`)
	if filepath.Dir(got) != rt.PathPrepend[0] {
		t.Errorf("python is %s, want the one in %s", got, rt.PathPrepend[0])
	}
	if resolved, _ := filepath.EvalSymlinks(got); resolved != real {
		t.Errorf("python is %s, a link to %s; want %s", got, resolved, real)
	}

	notExec := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/no/such/python":  "environment.interpreter_path /no/such/python does not exist on this node",
		notExec:            "environment.interpreter_path " + notExec + " is not an executable file on this node",
		filepath.Dir(fake): "environment.interpreter_path " + filepath.Dir(fake) + " is not an executable file on this node",
		"python3":          "environment.interpreter_path python3 must be an absolute path",
	} {
		_, err := c.Prepare(context.Background(), &Spec{Kind: KindUserManaged, InterpreterPath: path}, nil, nil)
		if err == nil || err.Error() != want || !errors.Is(err, ErrBuild) {
			t.Errorf("interpreter_path %s: %v; want %q wrapping ErrBuild", path, err, want)
		}
	}
}

func TestRuntimeEnviron(t *testing.T) {
	t.Parallel()
	rt := &Runtime{PathPrepend: []string{"/env/bin", "/more"}, Vars: []string{"VIRTUAL_ENV=/env"}}
	for _, tc := range []struct {
		rt         *Runtime
		base, want []string
	}{
		{rt, []string{"HOME=/root", "PATH=/old", "VIRTUAL_ENV=/other", "PATH=/usr/bin", "X=a=b"},
			[]string{"HOME=/root", "X=a=b", "PATH=/env/bin:/more:/usr/bin", "VIRTUAL_ENV=/env"}},
		{rt, []string{"HOME=/root"}, []string{"HOME=/root", "PATH=/env/bin:/more", "VIRTUAL_ENV=/env"}},
		{rt, []string{"PATH="}, []string{"PATH=/env/bin:/more", "VIRTUAL_ENV=/env"}},
		{&Runtime{}, []string{"PATH=/usr/bin", "A=1"}, []string{"A=1", "PATH=/usr/bin"}},
		{nil, []string{"PATH=/usr/bin", "A=1"}, []string{"PATH=/usr/bin", "A=1"}},
	} {
		if diff := cmp.Diff(tc.want, tc.rt.Environ(tc.base)); diff != "" {
			t.Errorf("Environ(%q) (-want +got):\n%s", tc.base, diff)
		}
	}
}

func TestReleaseTwiceAndNil(t *testing.T) {
	t.Parallel()
	c := &Cache{Dir: t.TempDir(), MaxBytes: 1, Images: newFakeImages(10)}
	rt, _ := prepare(t, c, imageSpec("a"), &fetcher{})
	rt.Release()
	rt.Release()
	(*Runtime)(nil).Release()
	// Released, so the next build may evict it.
	prepare(t, c, imageSpec("b"), &fetcher{})
	if _, err := os.Stat(c.path(rt.Hash)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("released environment not evicted: %v", err)
	}
}

// TestCancelKillsTheBuild cancels a build whose tool has a child of its
// own: both die, and nothing is cached.
func TestCancelKillsTheBuild(t *testing.T) {
	tools := t.TempDir()
	copyFile(t, "testdata/slow-conda", filepath.Join(tools, "micromamba"))
	t.Setenv("PATH", tools+string(filepath.ListSeparator)+os.Getenv("PATH"))
	c := &Cache{Dir: t.TempDir()}
	s := &Spec{Kind: KindConda, CondaFile: "env.yml", Context: "snap"}
	f := &fetcher{files: map[string]string{"env.yml": "dependencies: [numpy]\n"}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() {
		_, err := c.Prepare(ctx, s, f.fetch, io.Discard)
		done <- err
	}()
	var pids []int
	for _, name := range []string{"tool.pid", "child.pid"} {
		b := waitForFile(t, filepath.Join(tools, name))
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrBuild) {
		t.Errorf("canceled build: %v; want context.Canceled, not ErrBuild", err)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if _, err := os.Stat(c.path(s.Hash())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a canceled build left its folder: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// waitForFile returns the content of path once it has some. The deadline
// only stops a broken test from hanging.
func waitForFile(t *testing.T, path string) []byte {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return b
		}
	}
	t.Fatalf("%s never appeared", path)
	return nil
}

// waitGone waits for process pid to be gone or a zombie: in a container
// nobody may reap an orphan.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// "pid (comm) state ...": comm may hold spaces, so read after ")".
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return
		}
	}
	t.Errorf("process %d still runs after the build was canceled", pid)
}

func TestRelativeDir(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	c := &Cache{Dir: "envs", Images: newFakeImages(10)}
	s := imageSpec("a")
	prepare(t, c, s, &fetcher{})
	if _, err := readRecord(filepath.Join(root, "envs", s.Hash())); err != nil {
		t.Errorf("no build under the working directory: %v", err)
	}
	rt, _ := prepare(t, c, &Spec{Kind: KindUserManaged, InterpreterPath: "/bin/sh"}, nil)
	if want := filepath.Join(root, "envs", "shims", rt.Hash); len(rt.PathPrepend) != 1 || rt.PathPrepend[0] != want {
		t.Errorf("PathPrepend %q, want [%s]", rt.PathPrepend, want)
	}
}
