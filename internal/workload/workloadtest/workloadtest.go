// Package workloadtest is the harness the tests of workloads (sweeps,
// schedules, pipelines, endpoints) run their controllers on: a real
// workspace on a real SQLite store in a temporary folder, a compute
// target that records launches instead of starting runners (the Target
// interface is a boundary Ferry owns, and these tests are about the
// controllers), and a clock the test moves. Loops do not run on their
// own: the test runs their passes with Pass.
package workloadtest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Owner is the workspace owner's principal, as the owner token gives.
var Owner = auth.Principal{Kind: auth.KindOwner, Subject: "owner"}

// Harness is a workspace under test.
type Harness struct {
	WS     *workspace.Service
	Store  store.Store
	Clock  *Clock
	Target *Target
}

// New makes a workspace whose every compute is one Target of slots
// slots, with the clock at 2026-01-01 UTC; what it made ends with t.
func New(t testing.TB, slots int) *Harness {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{Store: st, Clock: &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, Target: &Target{Slots: slots}}
	h.WS, err = workspace.New(context.Background(), workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:      func(*spec.Compute) (compute.Target, error) { return h.Target, nil },
		LeaseTimeout: 10 * time.Second, Now: h.Clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Submit submits the job of a job file as the owner.
func (h *Harness) Submit(t testing.TB, doc string) *apitypes.Job {
	t.Helper()
	j, err := spec.ParseJob([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.WS.SubmitJob(context.Background(), Owner, workspace.Submission{Spec: j})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Job reads a job as `ferry job show` does, history included.
func (h *Harness) Job(t testing.TB, name string) *apitypes.Job {
	t.Helper()
	j, err := h.WS.GetJob(context.Background(), name, true)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Pass runs one pass of the loop named name (workspace.Service.RunPass).
func (h *Harness) Pass(t testing.TB, name string) {
	t.Helper()
	if err := h.WS.RunPass(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

// Clock is a clock that moves when the test says.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Target is a compute target that records the attempts it is asked to
// launch and starts nothing.
type Target struct {
	Slots int

	mu       sync.Mutex
	launched []compute.Launch
}

var _ compute.Target = (*Target)(nil)

// Type implements compute.Target.
func (f *Target) Type() string { return "fake" }

// Admit implements compute.Target: it admits every job.
func (f *Target) Admit(*spec.Job, *environment.Spec) error { return nil }

// Capacity implements compute.Target.
func (f *Target) Capacity() int { return f.Slots }

// Launch implements compute.Target.
func (f *Target) Launch(_ context.Context, l compute.Launch) (compute.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launched = append(f.launched, l)
	return "", nil
}

// Launched are the jobs launched so far, in order.
func (f *Target) Launched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.launched {
		out = append(out, l.Job)
	}
	return out
}
