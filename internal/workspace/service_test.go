package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

// fakeTarget records launches instead of starting runners: the Target
// interface is a boundary Ferry owns, and these tests are about the service.
type fakeTarget struct {
	mu       sync.Mutex
	capacity int
	launched []compute.Launch
	fail     error
	kept     map[string][]byte // "job/attempt" -> a final report a runner kept
	carries  bool              // hands the assignment over with the launch
}

func (f *fakeTarget) CarriesAssignment() bool { return f.carries }

func (f *fakeTarget) FinalReport(job string, attempt int) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.kept[fmt.Sprintf("%s/%d", job, attempt)]
	return data, ok
}

func (f *fakeTarget) Type() string                             { return "fake" }
func (f *fakeTarget) Admit(*spec.Job, *environment.Spec) error { return nil }
func (f *fakeTarget) Capacity() int                            { return f.capacity }
func (f *fakeTarget) Launch(_ context.Context, l compute.Launch) (compute.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return "", f.fail
	}
	f.launched = append(f.launched, l)
	return "", nil
}

func (f *fakeTarget) jobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.launched {
		out = append(out, l.Job)
	}
	return out
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var owner = auth.Principal{Kind: auth.KindOwner, Subject: "owner"}

func newService(t *testing.T, target *fakeTarget) (*Service, *clock) {
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
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := New(context.Background(), Config{
		PoolTypes: testPoolTypes,
		Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:      func(*spec.Compute) (compute.Target, error) { return target, nil },
		LeaseTimeout: 10 * time.Second, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func submit(t *testing.T, s *Service, name string) {
	t.Helper()
	if _, err := s.SubmitJob(context.Background(), owner, Submission{Spec: &spec.Job{Name: name, Command: "true"}}); err != nil {
		t.Fatal(err)
	}
}

// dispatch runs one dispatcher pass and waits for the hand-offs it began.
func dispatch(t *testing.T, s *Service) {
	t.Helper()
	if err := s.dispatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.handOffs.Wait()
}

func status(t *testing.T, s *Service, name string) *apitypes.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), name, true)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func runPrincipal(job string, attempt int) auth.Principal {
	return auth.Principal{Kind: auth.KindRun, Subject: job, Attempt: attempt}
}

func TestDispatchFillsCapacityInSubmitOrder(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 2}
	s, _ := newService(t, target)
	for _, n := range []string{"j1", "j2", "j3"} {
		submit(t, s, n)
	}
	dispatch(t, s)
	if got := target.jobs(); len(got) != 2 || got[0] != "j1" || got[1] != "j2" {
		t.Fatalf("launched %v, want j1 j2", got)
	}
	if st := status(t, s, "j3").Status; st != apitypes.StatusQueued {
		t.Fatalf("j3 is %s", st)
	}
	zero := 0
	if err := s.ReportStatus(ctx, runPrincipal("j1", 1), "j1", 1, apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	dispatch(t, s)
	if got := target.jobs(); len(got) != 3 || got[2] != "j3" {
		t.Fatalf("launched %v, want j3 third", got)
	}
}

func TestRunnerWritesAreFenced(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	s, _ := newService(t, target)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 2, apitypes.Report{Status: apitypes.StatusRunning}); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Errorf("token of attempt 1 writing attempt 2: %v", err)
	}
	if err := s.ReportStatus(ctx, runPrincipal("b", 1), "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Errorf("b's token writing a: %v", err)
	}
	// Progress and an end with nothing to check are fenced inside their
	// store update, an end with outputs by a read first: each refuses a
	// stale attempt and a job that does not exist.
	for _, r := range []apitypes.Report{
		{Status: apitypes.StatusRunning},
		{Status: apitypes.StatusFinalizing},
		{Status: apitypes.StatusCompleted},
		{Status: apitypes.StatusCompleted, Outputs: &apitypes.Outputs{}, Finalizing: "uploading outputs"},
		{Status: apitypes.StatusCompleted, Outputs: &apitypes.Outputs{Skipped: []apitypes.SkippedOutput{{Output: "outputs", Path: "x", Reason: "r"}}}},
	} {
		if err := s.ReportStatus(ctx, owner, "a", 7, r); apperr.CodeOf(err) != apperr.CodeConflict {
			t.Errorf("%+v of a stale attempt: %v", r, err)
		}
		if err := s.ReportStatus(ctx, owner, "nope", 1, r); apperr.CodeOf(err) != apperr.CodeNotFound {
			t.Errorf("%+v of a job that does not exist: %v", r, err)
		}
	}
	// A refused end revokes nothing: the current attempt's token stands.
	if _, err := s.st.TokenByHash(ctx, auth.Hash(target.runToken("a"))); err != nil {
		t.Errorf("the run token of attempt 1 after refused ends: %v", err)
	}
	if j, err := s.GetJob(ctx, "a", false); err != nil {
		t.Fatal(err)
	} else if j.Status != apitypes.StatusPreparing {
		t.Errorf("after refused reports job a is %s, want %s", j.Status, apitypes.StatusPreparing)
	}
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, apitypes.Report{Status: "Paused"}); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("unknown status: %v", err)
	}
	if err := s.AddMetrics(ctx, runPrincipal("b", 1), "a", []apitypes.Metric{{Name: "x", Value: 1}}); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Errorf("metrics into another job: %v", err)
	}
}

// A runner's numbered metrics are recorded once however often a batch is
// sent; only a run token numbers them.
func TestNumberedMetricsAreRecordedOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	run := runPrincipal("a", 1)
	batch := []apitypes.Metric{{Name: "loss", Value: 1, Step: 1}, {Name: "loss", Value: 2, Step: 2}}
	for range 2 {
		if high, err := s.AddNumberedMetrics(ctx, run, "a", 0, 1, batch); err != nil || high != 2 {
			t.Fatalf("AddNumberedMetrics = %d, %v; want 2", high, err)
		}
	}
	if _, err := s.AddNumberedMetrics(ctx, run, "a", 0, 2, []apitypes.Metric{batch[1], {Name: "loss", Value: 3, Step: 3}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListMetrics(ctx, "a", "loss")
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, m := range got {
		steps = append(steps, m.Step)
	}
	if d := cmp.Diff([]int64{1, 2, 3}, steps); d != "" {
		t.Errorf("steps recorded (-want +got):\n%s", d)
	}
	if _, err := s.AddNumberedMetrics(ctx, owner, "a", 0, 9, batch); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("numbered metrics with an owner token: %v", err)
	}
}

func TestLogAppendIsIdempotentByOffset(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	who := runPrincipal("a", 1)
	steps := []struct {
		offset int64
		data   string
		size   int64
		code   apperr.Code
	}{
		{0, "abc", 3, 0},
		{0, "abc", 3, 0},                   // resent after a lost reply
		{2, "cdef", 6, 0},                  // overlaps what is stored
		{10, "zz", 6, apperr.CodeConflict}, // a gap
	}
	for i, st := range steps {
		size, err := s.AppendLog(ctx, who, "a", 1, 0, st.offset, []byte(st.data))
		if st.code != 0 {
			if apperr.CodeOf(err) != st.code {
				t.Fatalf("step %d: err %v, want code %d", i, err, st.code)
			}
			continue
		}
		if err != nil || size != st.size {
			t.Fatalf("step %d: size %d err %v, want %d", i, size, err, st.size)
		}
	}
	var buf bytes.Buffer
	if _, _, err := s.ReadLog(ctx, "a", 0, 0, 1<<20, &buf); err != nil || buf.String() != "abcdef" {
		t.Fatalf("log = %q, %v", buf.String(), err)
	}
}

func TestSilentRunnerLosesItsLease(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	clk.advance(9 * time.Second)
	if _, err := s.Heartbeat(ctx, runPrincipal("a", 1), "a", 1); err != nil {
		t.Fatal(err)
	}
	clk.advance(9 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, s, "a").Status; st != apitypes.StatusPreparing {
		t.Fatalf("job with a fresh heartbeat is %s", st)
	}
	clk.advance(2 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	j := status(t, s, "a")
	if j.Status != apitypes.StatusFailed || j.Ended == nil {
		t.Fatalf("silent runner: %+v", j)
	}
	// A runner that comes back late is told to stop.
	if hb, err := s.Heartbeat(ctx, runPrincipal("a", 1), "a", 1); err != nil || !hb.Cancel {
		t.Fatalf("heartbeat after the lease ended: %+v %v", hb, err)
	}
}

// A silent attempt whose runner kept its final report on the target (it
// gave up on the server) ends as that report says, not as lost.
func TestSilentRunnerFinalReportIsCollected(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 2, kept: map[string][]byte{
		"a/1": []byte(`{"status": "Completed", "reason": "exit code 0", "exit_code": 0}`),
		"b/1": []byte(`{"status": "Running"}`), // not an end: ignored
	}}
	s, clk := newService(t, target)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	clk.advance(11 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	a := status(t, s, "a")
	if a.Status != apitypes.StatusCompleted || a.ExitCode == nil || *a.ExitCode != 0 || !strings.Contains(a.StatusReason, "final report") {
		t.Errorf("a with a kept report: %+v", a)
	}
	if b := status(t, s, "b"); b.Status != apitypes.StatusFailed || !strings.Contains(b.StatusReason, "runner lost") {
		t.Errorf("b with a kept non-final report: %+v", b)
	}
}

func TestCancelRunningJobGoesThroughTheRunner(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	who := runPrincipal("a", 1)
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(ctx, who, "a"); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Fatalf("run token canceled a job: %v", err)
	}
	j, err := s.CancelJob(ctx, owner, "a")
	if err != nil || j.Status != apitypes.StatusCancelRequested || j.CancelRequestedBy != "owner" {
		t.Fatalf("cancel: %+v %v", j, err)
	}
	// A late Running report does not undo the cancel request.
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusFinalizing}); err != nil {
		t.Fatal(err)
	}
	hb, err := s.Heartbeat(ctx, who, "a", 1)
	if err != nil || !hb.Cancel {
		t.Fatalf("heartbeat after cancel: %+v %v", hb, err)
	}
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request"}); err != nil {
		t.Fatal(err)
	}
	if j := status(t, s, "a"); j.Status != apitypes.StatusCanceled {
		t.Fatalf("after the runner's report: %s", j.Status)
	}
	if _, err := s.CancelJob(ctx, owner, "a"); apperr.CodeOf(err) != apperr.CodeConflict {
		t.Fatalf("cancel of a canceled job: %v", err)
	}
}

func TestLaunchFailureFailsTheJob(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 1, fail: errors.New("no such binary")})
	submit(t, s, "a")
	dispatch(t, s)
	j := status(t, s, "a")
	if j.Status != apitypes.StatusFailed || j.Error != "no such binary" {
		t.Fatalf("job = %+v", j)
	}
}

// A list shows each job's latest metrics, as showing the job does, though
// it reads them for all the jobs at once.
func TestListJobsShowsEachJobsLatestMetrics(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 3})
	for _, n := range []string{"a", "b", "c"} {
		submit(t, s, n)
	}
	if err := s.AddMetrics(ctx, owner, "a", []apitypes.Metric{{Name: "loss", Value: 2}, {Name: "acc", Value: 0.5}, {Name: "loss", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMetrics(ctx, owner, "c", []apitypes.Metric{{Name: "loss", Value: 7}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got, want := map[string]map[string]float64{}, map[string]map[string]float64{}
	for _, j := range list {
		got[j.Name] = j.Metrics
		want[j.Name] = status(t, s, j.Name).Metrics
	}
	if len(got) != 3 || len(want["a"]) != 2 || want["a"]["loss"] != 1 {
		t.Fatalf("jobs %v, a's metrics %v: the test's setup is off", got, want["a"])
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("metrics in the list (-show +list):\n%s", d)
	}
}

// Between its full reads of the queue, the dispatcher reads of each
// compute only the jobs its free slots could take: by priority first, then
// submit order, as from the whole queue.
func TestDispatchBetweenFullScansTakesPriorityFirst(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	s, _ := newService(t, target)
	submit(t, s, "a")
	dispatch(t, s) // a full scan: the first pass
	submit(t, s, "b")
	if _, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "c", Command: "true", QueueSettings: &spec.QueueSettings{Priority: "high"}}}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	for _, done := range []string{"a", "c"} {
		if err := s.ReportStatus(ctx, runPrincipal(done, 1), done, 1, apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, s) // within fullScanEvery of the first
	}
	if diff := cmp.Diff([]string{"a", "c", "b"}, target.jobs()); diff != "" {
		t.Errorf("launch order (-want +got):\n%s", diff)
	}
}

// The dispatcher's look at the whole queue fails the jobs of a compute
// that is gone, and only those: a job waiting for a busy compute stays
// queued.
func TestDispatchFailsTheJobsOfAGoneCompute(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	s, _ := newService(t, target)
	for _, n := range []string{"a", "b", "c", "d"} {
		submit(t, s, n)
	}
	for _, n := range []string{"c", "d"} {
		if _, err := s.st.UpdateJob(ctx, n, func(j *store.Job) (*store.Event, error) {
			j.Compute = "gone"
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch(t, s) // the first pass looks at the whole queue
	if diff := cmp.Diff([]string{"a"}, target.jobs()); diff != "" {
		t.Errorf("launched (-want +got):\n%s", diff)
	}
	if j := status(t, s, "b"); j.Status != apitypes.StatusQueued {
		t.Errorf("b, waiting for a busy compute: %s (%s)", j.Status, j.StatusReason)
	}
	for _, n := range []string{"c", "d"} {
		if j := status(t, s, n); j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "compute gone no longer exists") {
			t.Errorf("%s, of a gone compute: %s (%s)", n, j.Status, j.StatusReason)
		}
	}
}
