// Package computetest is the conformance suite every compute target
// passes: the same Azure ML v2 job files, run through a real Ferry server,
// give the same logs, exit codes, outputs, inputs, variables, cancels and
// timeouts, and survive a server crash, whatever runs them (docs/architecture.md,
// "How a job runs": one runner, many launchers).
//
// A target's test gives Run a Harness that starts a server with the target
// ready and says where the target's job processes can be seen. The suite
// drives the server only through the ferry command line and the API, as a
// user would, so it holds for every target alike; adding a target is a
// compute file and, where its processes are not on this host, a function
// that lists them.
package computetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// Harness is one compute target under test.
type Harness struct {
	// Compute is what the suite's jobs give as compute:
	// ("azureml:gpu-box"); "" leaves the field out, for the workspace's
	// default target (local).
	Compute string

	// Start starts a fresh Ferry server with the target ready for jobs
	// and ends it, and everything it started, when t ends. The target
	// must run at most one job at a time, so that a second one waits
	// Queued (the local target with --local-capacity 1, a pool of one
	// node). Its jobs must see this host's file system at the same paths
	// (they run here, or on machines that share it): cases watch jobs
	// through files in a shared directory. Jobs run bash, coreutils and
	// python3 from the machine, with no environment of their own.
	Start func(t *testing.T) Server

	// JobProcs lists the live processes of a job wherever the target runs
	// them, each as "PID command line", with the PIDs the job's processes
	// see as their own ($$ in its shell). Nil means HostJobProcs.
	JobProcs func(job string) []string

	// Skip names the cases this target cannot pass yet, each with why (a
	// known bug, named in words someone can look up). Only that case of
	// only this target is skipped; a name that is no case fails the run.
	Skip map[string]string
}

// Server is a running Ferry server, as the suite drives it. Every method
// fails t on an error it cannot report otherwise.
type Server interface {
	// Ferry runs the ferry command line against the server as its owner.
	Ferry(t *testing.T, args ...string) Result
	// Get makes an authenticated GET of path on the server's API.
	Get(t *testing.T, path string) (code int, body []byte)
	// Kill9 kills the server with SIGKILL, as a crash would, leaving what
	// it started running.
	Kill9(t *testing.T)
	// Restart starts the killed server again on the same data and
	// address, and returns once it answers.
	Restart(t *testing.T)
}

// Result is what a ferry command printed and how it exited.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// HostJobProcs lists the live processes on this host whose environment
// holds FERRY_JOB_ID=job (testutil.JobProcs), each as "PID command line".
func HostJobProcs(job string) []string {
	var out []string
	for _, p := range testutil.JobProcs(job) {
		out = append(out, strconv.Itoa(p.PID)+" "+p.CmdLine())
	}
	return out
}

// Run runs every case against the harness's target, each as a subtest,
// one after another on one server; the server kill is last, since it
// takes the server down.
func Run(t *testing.T, h Harness) {
	for name := range h.Skip {
		if !slices.ContainsFunc(cases, func(c testCase) bool { return c.name == name }) {
			t.Fatalf("Harness.Skip names %q, which is no case of the suite", name)
		}
	}
	if h.JobProcs == nil {
		h.JobProcs = HostJobProcs
	}
	s := &suite{h: h, srv: h.Start(t), shared: sharedDir(t)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := h.Skip[c.name]; ok {
				t.Skip(why)
			}
			c.run(t, s)
		})
	}
}

// suite is what every case works with.
type suite struct {
	h      Harness
	srv    Server
	shared string // a directory every job may write and the test reads
}

// sharedDir is a directory that the jobs, whichever account they run as,
// can write, and that the test reads to watch them from outside.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-computetest-")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// job is a job as `ferry job show -o json` prints it.
type job struct {
	Name              string     `json:"name"`
	Status            string     `json:"status"`
	Compute           string     `json:"compute"`
	StatusReason      string     `json:"status_reason"`
	ExitCode          *int       `json:"exit_code"`
	Error             string     `json:"error"`
	CancelRequestedBy string     `json:"cancel_requested_by"`
	Started           *time.Time `json:"started"`
	History           []struct {
		To     string `json:"to"`
		Reason string `json:"reason"`
	} `json:"history"`
}

func (j job) terminal() bool {
	return j.Status == "Completed" || j.Status == "Failed" || j.Status == "Canceled"
}

// reached counts the transitions of the job into status.
func (j job) reached(status string) int {
	n := 0
	for _, h := range j.History {
		if h.To == status {
			n++
		}
	}
	return n
}

func (s *suite) mustFerry(t *testing.T, args ...string) Result {
	t.Helper()
	r := s.srv.Ferry(t, args...)
	if r.Code != 0 {
		t.Fatalf("ferry %s: exit %d\n--- stdout\n%s\n--- stderr\n%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// submit writes the job file (and files beside it) into a fresh folder,
// with the harness's compute, creates the job under a fresh name and
// returns the name. A job the case leaves unfinished is canceled when
// the case ends, so that the next case finds the target free, and any
// process of it left on this host is killed.
func (s *suite) submit(t *testing.T, yaml string, files map[string]string) string {
	t.Helper()
	name, _ := s.create(t, yaml, files)
	return name
}

// create is submit with more arguments for `ferry job create` (--stream),
// and what the command printed.
func (s *suite) create(t *testing.T, yaml string, files map[string]string, args ...string) (string, Result) {
	t.Helper()
	dir := t.TempDir()
	if s.h.Compute != "" {
		yaml += "\ncompute: " + s.h.Compute + "\n"
	}
	all := map[string]string{"job.yml": yaml}
	for p, c := range files {
		all[p] = c
	}
	for p, c := range all {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := "ct-" + strings.ReplaceAll(filepath.Base(t.Name()), "_", "-") + "-" + randomHex(4)
	r := s.srv.Ferry(t, append([]string{"job", "create", "-f", filepath.Join(dir, "job.yml"), "--name", name}, args...)...)
	if r.Code != 0 && s.srv.Ferry(t, "job", "show", name).Code != 0 {
		t.Fatalf("ferry job create: exit %d\n--- stdout\n%s\n--- stderr\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if want := strings.TrimPrefix(s.h.Compute, "azureml:"); want != "" {
		if got := s.show(t, name).Compute; got != want {
			t.Fatalf("job %s is on compute %q, want the harness's %q", name, got, want)
		}
	}
	t.Cleanup(func() {
		if j := s.show(t, name); !j.terminal() {
			s.srv.Ferry(t, "job", "cancel", name)
			s.waitStatus(t, name, "Canceled", "Completed", "Failed")
		}
		// What a failed case found left over is ended here, so that one
		// failure does not leak into the next case or test.
		for _, p := range testutil.JobProcs(name) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
	return name, r
}

func (s *suite) show(t *testing.T, name string) job {
	t.Helper()
	r := s.mustFerry(t, "job", "show", name, "-o", "json")
	var j job
	if err := json.Unmarshal([]byte(r.Stdout), &j); err != nil {
		t.Fatalf("job show %s -o json: %v\n%s", name, err, r.Stdout)
	}
	return j
}

// patience bounds every wait of the suite. Waits end as soon as what they
// wait for happens; this is only how long a broken target gets before the
// case fails instead of hanging (a pool node's cancel grace is 10 s).
const patience = 90 * time.Second

// waitStatus waits until the job is in one of the statuses, and fails
// the case when it ends in another.
func (s *suite) waitStatus(t *testing.T, name string, statuses ...string) job {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		j := s.show(t, name)
		if slices.Contains(statuses, j.Status) {
			return j
		}
		if j.terminal() {
			t.Fatalf("job %s ended %s (%s; %s), want %v\nits log:\n%s", name, j.Status, j.StatusReason, j.Error, statuses, s.log(t, name))
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s (%s) after %s, want one of %v", name, j.Status, j.StatusReason, patience, statuses)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// log is the job's whole log so far, as the API serves it.
func (s *suite) log(t *testing.T, name string) string {
	t.Helper()
	code, body := s.srv.Get(t, "/v1/jobs/"+name+"/logs")
	if code != 200 {
		t.Fatalf("GET the log of %s: %d %s", name, code, body)
	}
	return string(body)
}

// waitLog waits until the job's log holds want.
func (s *suite) waitLog(t *testing.T, name, want string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		got := s.log(t, name)
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s's log never showed %q; it is %s with:\n%s", name, want, s.show(t, name).Status, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// download downloads all of a job's outputs into a fresh folder.
func (s *suite) download(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	s.mustFerry(t, "job", "download", name, "--download-path", dir)
	return dir
}

// waitFile waits until a file in the shared folder exists and holds at
// least lines lines, and returns its content.
func (s *suite) waitFile(t *testing.T, name string, lines int) string {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		data, err := os.ReadFile(filepath.Join(s.shared, name))
		if err == nil && strings.Count(string(data), "\n") >= lines {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not write %d lines to %s: %q, %v", lines, name, data, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitNoProcs waits until the target lists no process of the job.
func (s *suite) waitNoProcs(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		left := s.h.JobProcs(name)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of job %s are left %s after it ended:\n%s", name, patience, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
