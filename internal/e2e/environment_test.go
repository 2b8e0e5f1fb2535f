package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// offlineWheels makes a wheel folder with two versions of a tiny package
// and points pip at it the way a node's pip configuration would, so no
// index is needed. The server's runners inherit the variables.
func offlineWheels(t *testing.T) {
	t.Helper()
	testutil.RequirePython(t)
	wheels := t.TempDir()
	testutil.MakeWheel(t, wheels, "ferrytestpkg", "1.0", map[string]string{"ferrytestpkg/__init__.py": "VALUE = 42\n"})
	testutil.MakeWheel(t, wheels, "ferrytestpkg", "2.0", map[string]string{"ferrytestpkg/__init__.py": "VALUE = 43\n"})
	t.Setenv("PIP_NO_INDEX", "1")
	t.Setenv("PIP_FIND_LINKS", wheels)
}

const venvJob = `
command: python -c "import ferrytestpkg, sys; print('value', ferrytestpkg.VALUE, 'prefix', sys.prefix)"
environment:
  python:
    requirements: requirements.txt
`

func TestVirtualenvIsBuiltOnceAndReused(t *testing.T) {
	offlineWheels(t)
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"job.yml": venvJob, "requirements.txt": "ferrytestpkg==1.0\n"})
	job := filepath.Join(dir, "job.yml")

	first := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "venv-1")
	mustContain(t, "first job's log", first.stdout, "building environment", "Successfully installed ferrytestpkg-1.0", "value 42")
	prefix := fieldAfter(first.stdout, "prefix")

	second := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "venv-2")
	mustContain(t, "second job's log", second.stdout, "reusing environment", "value 42")
	if strings.Contains(second.stdout, "Successfully installed") || strings.Contains(second.stdout, "building environment") {
		t.Errorf("the second job built again:\n%s", second.stdout)
	}
	if got := fieldAfter(second.stdout, "prefix"); got != prefix || prefix == "" {
		t.Errorf("second job ran in %q, first in %q; want the same virtualenv", got, prefix)
	}
	if h := historyOf(t, s, "venv-2"); !strings.Contains(h, "Preparing,Running") {
		t.Errorf("history %s", h)
	}

	// One changed byte in the requirements is a new environment.
	writeFiles(t, dir, map[string]string{"requirements.txt": "ferrytestpkg==2.0\n"})
	third := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "venv-3")
	mustContain(t, "changed requirements", third.stdout, "building environment", "value 43")
	if fieldAfter(third.stdout, "prefix") == prefix {
		t.Errorf("a changed requirements file reused the old virtualenv %s", prefix)
	}

	// A broken requirement fails the job at Preparing with pip's own words,
	// and is not cached: the next job with it builds (and fails) again.
	writeFiles(t, dir, map[string]string{"requirements.txt": "nosuchpkg==9\n"})
	for _, name := range []string{"venv-broken-1", "venv-broken-2"} {
		r := s.ferry("job", "create", "-f", job, "--stream", "--name", name)
		if r.code == 0 {
			t.Fatalf("a broken requirement passed: %s", r)
		}
		mustContain(t, name+" log", r.stdout, "building environment", "No matching distribution found for nosuchpkg==9", "environment build failed")
		if strings.Contains(r.stdout, "environment build failed: environment build failed") {
			t.Errorf("%s: the log says it twice:\n%s", name, r.stdout)
		}
		j := s.show(name)
		if j.Status != "Failed" || j.StatusReason != "environment build failed" {
			t.Errorf("%s: status %s (%s), want Failed (environment build failed)", name, j.Status, j.StatusReason)
		}
		if h := historyOf(t, s, name); strings.Contains(h, "Running") {
			t.Errorf("%s reached Running: %s", name, h)
		}
	}
}

func TestSameUnbuiltEnvironmentIsBuiltOnceForTwoJobs(t *testing.T) {
	offlineWheels(t)
	s := startServer(t, "--local-capacity", "2")
	job := jobFile(t, venvJob, map[string]string{"requirements.txt": "ferrytestpkg==1.0\n"})
	s.mustFerry("job", "create", "-f", job, "--name", "twin-1")
	s.mustFerry("job", "create", "-f", job, "--name", "twin-2")
	builds := 0
	for _, name := range []string{"twin-1", "twin-2"} {
		s.waitStatus(name, "Completed")
		log := s.mustFerry("job", "stream", name).stdout
		mustContain(t, name, log, "value 42")
		builds += strings.Count(log, "Successfully installed ferrytestpkg")
	}
	if builds != 1 {
		t.Errorf("pip installed %d times for two jobs with one environment, want 1", builds)
	}
}

func TestRegisteredEnvironments(t *testing.T) {
	offlineWheels(t)
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"env.yml": `$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json
name: testpkg-env
description: the test package
python:
  requirements: requirements.txt
`,
		"requirements.txt": "ferrytestpkg==1.0\n",
		"job.yml": `command: python -c "import ferrytestpkg; print('value', ferrytestpkg.VALUE)"
environment: azureml:testpkg-env:1
`,
	})
	env := filepath.Join(dir, "env.yml")
	v1 := s.mustFerry("environment", "create", "-f", env, "-o", "json")
	var got struct {
		Name, Version, Hash string
	}
	if err := json.Unmarshal([]byte(v1.stdout), &got); err != nil || got.Name != "testpkg-env" || got.Version != "1" || len(got.Hash) != 64 {
		t.Fatalf("environment create: %+v, %v\n%s", got, err, v1)
	}
	// Registering unchanged content again is not a new version.
	again := s.mustFerry("environment", "create", "-f", env, "-o", "json")
	mustContain(t, "unchanged create", again.stdout, `"version": "1"`)

	// A changed file with no version gets the next one; a changed file
	// under an existing version is refused.
	writeFiles(t, dir, map[string]string{"requirements.txt": "ferrytestpkg==2.0\n"})
	mustContain(t, "changed create", s.mustFerry("environment", "create", "-f", env).stdout, "version:", "2")
	r := s.ferry("environment", "create", "-f", env, "--version", "1")
	if r.code == 0 {
		t.Fatalf("changed content under version 1 was taken: %s", r)
	}
	mustContain(t, "immutable version", r.stderr, "testpkg-env:1", "other content")

	mustContain(t, "list", s.mustFerry("environment", "list").stdout, "testpkg-env", "python")
	mustContain(t, "show latest", s.mustFerry("environment", "show", "testpkg-env@latest").stdout, "version:", "2")

	// Jobs refer to versions by azureml:name:version, name:version, name@latest.
	job := filepath.Join(dir, "job.yml")
	mustContain(t, "job on :1", s.mustFerry("job", "create", "-f", job, "--stream").stdout, "value 42")
	mustContain(t, "job on @latest", s.mustFerry("job", "create", "-f", job, "--stream", "--set", "environment=testpkg-env@latest").stdout, "value 43")

	// Prebuilding on a target leaves the build for later jobs.
	mustContain(t, "build", s.mustFerry("environment", "build", "testpkg-env:2", "--compute", "local").stdout, "environment")

	before := countJobs(t, s)
	for ref, want := range map[string]string{
		"azureml:testpkg-evn:1": "did you mean testpkg-env",
		"testpkg-env:7":         "has no version 7; it has 1, 2",
	} {
		r := s.ferry("job", "create", "-f", job, "--set", "environment="+ref)
		if r.code == 0 {
			t.Errorf("unknown environment %s was taken", ref)
		}
		mustContain(t, ref, r.stderr, "environment", want)
	}
	if n := countJobs(t, s); n != before {
		t.Errorf("refused jobs were stored: %d jobs, want %d", n, before)
	}
}

// containersOf lists the containers, running or not, of a job.
func containersOf(t *testing.T, job string) []string {
	t.Helper()
	c := testutil.RequireDocker(t)
	list, err := c.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "ferry.job="+job))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestImageEnvironments(t *testing.T) {
	testutil.RequireBaseImage(t)
	removeNewEnvironmentImages(t)
	s := startServer(t, "--cancel-grace", "2s")

	// A build context with a Dockerfile FROM the base image; outputs
	// written inside the container come back; inputs and variables reach it.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"job.yml": `command: >-
  cat /etc/ferry-built && python3 -c "print('python', 6*7)" &&
  echo "greeting=$GREETING" && cat ${{inputs.data}} &&
  echo from-container > outputs/made.txt && test -w $FERRY_OUTPUTS_DIR && echo done
code: src
inputs:
  data:
    type: uri_file
    path: data.txt
environment_variables:
  GREETING: hi
environment:
  build:
    path: docker
`,
		"docker/Dockerfile": "FROM " + testutil.BaseImage + "\nRUN echo built-by-ferry > /etc/ferry-built\n",
		"src/main.py":       "print('code')\n",
		"data.txt":          "input-data\n",
	})
	job := filepath.Join(dir, "job.yml")
	first := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "img-1")
	mustContain(t, "first image job", first.stdout, "building environment", "built-by-ferry", "python 42", "greeting=hi", "input-data", "done")
	second := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "img-2")
	mustContain(t, "second image job", second.stdout, "reusing environment", "built-by-ferry", "done")
	if strings.Contains(second.stdout, "Step 1/") {
		t.Errorf("the second job built the image again:\n%s", second.stdout)
	}
	dl := t.TempDir()
	s.mustFerry("job", "download", "img-2", "--download-path", dl)
	if b, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "made.txt")); err != nil || string(b) != "from-container\n" {
		t.Errorf("output written in the container: %q, %v", b, err)
	}
	if ids := containersOf(t, "img-2"); len(ids) != 0 {
		t.Errorf("the finished job left containers %v", ids)
	}

	// A named image the node has runs as it is.
	plain := jobFile(t, "command: python3 -c \"print('plain', 2+3)\"\nenvironment:\n  image: "+testutil.BaseImage+"\n", nil)
	mustContain(t, "plain image", s.mustFerry("job", "create", "-f", plain, "--stream").stdout, "plain 5")

	// An image that is neither here nor pullable fails at Preparing.
	missing := jobFile(t, "command: \"true\"\nenvironment:\n  image: ferry-no-such-image:1\n", nil)
	r := s.ferry("job", "create", "-f", missing, "--stream", "--name", "img-missing")
	if r.code == 0 {
		t.Fatalf("a missing image ran: %s", r)
	}
	mustContain(t, "missing image log", r.stdout, "ferry-no-such-image:1", "not on this node and could not be pulled")
	if j := s.show("img-missing"); j.StatusReason != "environment build failed" {
		t.Errorf("missing image: %s (%s)", j.Status, j.StatusReason)
	}

	// A failing Dockerfile fails the job with the engine's words.
	broken := jobFile(t, "command: \"true\"\nenvironment:\n  build:\n    path: docker\n", map[string]string{
		"docker/Dockerfile": "FROM " + testutil.BaseImage + "\nRUN echo about-to-fail && exit 7\n",
	})
	r = s.ferry("job", "create", "-f", broken, "--stream", "--name", "img-broken")
	mustContain(t, "broken build log", r.stdout, "about-to-fail", "environment build failed")
	if j := s.show("img-broken"); j.Status != "Failed" || j.StatusReason != "environment build failed" {
		t.Errorf("broken build: %s (%s)", j.Status, j.StatusReason)
	}

	// Cancel stops the container, and timeout does too.
	long := jobFile(t, "command: echo started; sleep 300\nenvironment:\n  image: "+testutil.BaseImage+"\n", nil)
	s.mustFerry("job", "create", "-f", long, "--name", "img-cancel")
	s.waitStatus("img-cancel", "Running")
	waitLog(t, s, "img-cancel", "started")
	s.mustFerry("job", "cancel", "img-cancel")
	if j := s.waitStatus("img-cancel", "Canceled", "Failed", "Completed"); j.Status != "Canceled" {
		t.Errorf("canceled container job ended %s (%s)", j.Status, j.StatusReason)
	}
	waitNoContainers(t, "img-cancel")

	timeout := jobFile(t, "command: sleep 300\nlimits:\n  timeout: 2\nenvironment:\n  image: "+testutil.BaseImage+"\n", nil)
	s.ferry("job", "create", "-f", timeout, "--stream", "--name", "img-timeout")
	if j := s.show("img-timeout"); j.Status != "Failed" || j.StatusReason != "timeout" {
		t.Errorf("timed-out container job: %s (%s)", j.Status, j.StatusReason)
	}
	waitNoContainers(t, "img-timeout")
}

func waitNoContainers(t *testing.T, job string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(containersOf(t, job)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("job %s still has containers %v", job, containersOf(t, job))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitLog(t *testing.T, s *server, job, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := s.call("GET", "/v1/jobs/"+job+"/logs", s.token, nil)
		if code == 200 && strings.Contains(string(body), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s's log never showed %q: %s", job, want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fieldAfter returns the word after the first occurrence of word in text.
func fieldAfter(text, word string) string {
	f := strings.Fields(text)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == word {
			return f[i+1]
		}
	}
	return ""
}

// historyOf is a job's statuses, comma-separated, in order.
func historyOf(t *testing.T, s *server, name string) string {
	t.Helper()
	var seen []string
	for _, h := range s.show(name).History {
		seen = append(seen, h.To)
	}
	return strings.Join(seen, ",")
}

func TestImageEnvironmentRefusedWithoutDocker(t *testing.T) {
	// The server's machine has no reachable engine: image environments are
	// refused at submit, other environments are not.
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	s := startServer(t)
	before := countJobs(t, s)
	job := jobFile(t, "command: \"true\"\nenvironment:\n  image: "+testutil.BaseImage+"\n", nil)
	r := s.ferry("job", "create", "-f", job)
	if r.code == 0 {
		t.Fatalf("an image job was taken with no Docker engine: %s", r)
	}
	mustContain(t, "refusal", r.stderr, "environment", "Docker engine", "cannot be reached")
	if n := countJobs(t, s); n != before {
		t.Errorf("the refused job was stored")
	}
	s.mustFerry("job", "create", "-f", jobFile(t, "command: \"true\"\nenvironment:\n  user_managed: true\n", nil), "--stream")
}

// removeNewEnvironmentImages removes, when the test ends, the environment
// images (ferry-env:<hash>) it made, so test runs do not fill the engine.
func removeNewEnvironmentImages(t *testing.T) {
	t.Helper()
	c := testutil.RequireDocker(t)
	tags := func() map[string]bool {
		out := map[string]bool{}
		list, err := c.ImageList(context.Background(), image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", "ferry-env"))})
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range list {
			for _, tag := range im.RepoTags {
				out[tag] = true
			}
		}
		return out
	}
	before := tags()
	t.Cleanup(func() {
		for tag := range tags() {
			if !before[tag] {
				_, _ = c.ImageRemove(context.Background(), tag, image.RemoveOptions{PruneChildren: true})
			}
		}
	})
}
