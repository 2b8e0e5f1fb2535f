package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

// restartable opens the store and blobs of dir and returns a function
// that starts a Service on them: called twice, it is the same workspace
// after a server restart.
func restartable(t *testing.T, target *fakeTarget) func() *Service {
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
	return func() *Service {
		t.Helper()
		s, err := New(context.Background(), Config{
			PoolTypes: testPoolTypes,
			Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
			Targets:      func(*spec.Compute) (compute.Target, error) { return target, nil },
			LeaseTimeout: 10 * time.Second, Now: clk.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// dataVersions lists the versions of data asset name, with the job and
// output each registers.
func dataVersions(t *testing.T, s *Service, name string) []string {
	t.Helper()
	ds, err := s.assets.ListData(context.Background(), name, true)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, d.Version+" "+d.Tags["ferry.job"]+"/"+d.Tags["ferry.output"])
	}
	return out
}

func jobLog(t *testing.T, s *Service, job string, attempt int) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.logs.ReadAt(job, attempt, 0, 0, 1<<20, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestOutputRegistersAfterCrash: a server killed after it recorded a
// job's completion but before it registered the job's named outputs
// registers them when it starts again, once each; doing it again (the
// mark left by a kill after the registration) makes no second version,
// and a version another job's content holds is a line of the job's log,
// not a registration tried again for ever.
func TestOutputRegistersAfterCrash(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	start := restartable(t, target)
	s := start()
	_, other := putFile(t, s, "other rows")
	mustCreateData(t, s, dataFile("taken", "1", ""), other)
	_, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "reg", Command: "true", Outputs: map[string]spec.Output{
		"cleaned": {Name: "cleaned-rows", Version: "3"},
		"auto":    {Name: "auto-rows"},
		"clash":   {Name: "taken", Version: "1"},
		"empty":   {Name: "nothing"},
		"plain":   {},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	dispatch(t, s)
	_, snap := putFile(t, s, "rows")
	raw, err := json.Marshal(apitypes.Outputs{Named: map[string]string{"cleaned": snap, "auto": snap, "clash": snap, "plain": snap}})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	// The end's transaction alone: the server dies before the rest of
	// endAttempt.
	if owes, _, err := s.recordEnd(ctx, "reg", 1, attemptEnd{status: apitypes.StatusCompleted, exit: &zero, outputs: raw}, nil); err != nil || !owes {
		t.Fatalf("recordEnd: %v, %v", owes, err)
	}
	if got := dataVersions(t, s, "cleaned-rows"); len(got) != 0 {
		t.Fatalf("registered before the restart: %v", got)
	}

	// The restarted server's loop registers them on its first pass.
	s = start()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec, err := s.st.GetJob(ctx, "reg")
		if err != nil {
			t.Fatal(err)
		}
		if len(pendingOutputs(rec.Outputs)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted server left outputs unregistered: %s", rec.Outputs)
		}
	}
	cancel()
	<-done
	want := map[string]string{"cleaned-rows": "3 reg/cleaned", "auto-rows": "1 reg/auto", "taken": "1 /"}
	check := func(when string) {
		t.Helper()
		for name, w := range want {
			if got := dataVersions(t, s, name); len(got) != 1 || got[0] != w {
				t.Errorf("%s: versions of %s: %q, want [%s]", when, name, got, w)
			}
		}
		if got := dataVersions(t, s, "nothing"); len(got) != 0 {
			t.Errorf("%s: an output the job did not write is registered: %v", when, got)
		}
	}
	check("after the restart")
	log := jobLog(t, s, "reg", 1)
	for _, l := range []string{
		"ferry: output cleaned registered as data asset azureml:cleaned-rows:3",
		"ferry: output auto registered as data asset azureml:auto-rows:1",
		"ferry: output clash is not registered as data asset taken: data asset taken:1 is registered with other content",
		"ferry: output empty is not registered as data asset nothing: the job wrote nothing there",
	} {
		if !strings.Contains(log, l) {
			t.Errorf("the job's log lacks %q:\n%s", l, log)
		}
	}
	rec, err := s.st.GetJob(ctx, "reg")
	if err != nil {
		t.Fatal(err)
	}
	if p := pendingOutputs(rec.Outputs); len(p) != 0 {
		t.Errorf("still marked to register after the registration: %v", p)
	}
	if s.regs.retry["reg"] {
		t.Error("a version taken by other content is tried again")
	}
	if j := status(t, s, "reg"); j.Outputs == nil || j.Outputs.Named["cleaned"] != snap {
		t.Errorf("the job's outputs after the registration: %+v", j.Outputs)
	}

	// Killed after registering but before the mark was removed: the
	// next start finds the mark and registers nothing twice.
	if _, err := s.st.UpdateJob(ctx, "reg", func(j *store.Job) (*store.Event, error) {
		j.Outputs = withPending(j.Outputs, []string{"auto", "cleaned"})
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	s = start()
	if err := s.reconcileRegistrations(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a second restart")
	if n := strings.Count(jobLog(t, s, "reg", 1), "output auto registered as data asset azureml:auto-rows:1"); n != 2 {
		t.Errorf("the log says auto was registered %d times, want 2 (once a start)", n)
	}
}

// TestOutputRegistersOnTheEnd: with no crash, the registration follows
// the end at once and leaves no mark, and a stored outputs' mark never
// shows in the job's view.
func TestOutputRegistersOnTheEnd(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "reg", Command: "true", Outputs: map[string]spec.Output{
		"cleaned": {Name: "cleaned-rows"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	dispatch(t, s)
	// The runner uploads the output with its run token.
	run := runPrincipal("reg", 1)
	sum := sha256.Sum256([]byte("rows"))
	digest := hex.EncodeToString(sum[:])
	if err := s.PutBlob(ctx, run, digest, strings.NewReader("rows")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.CreateSnapshot(ctx, run, []byte(`{"files":[{"path":"f.txt","mode":420,"size":4,"sha256":"`+digest+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := s.ReportStatus(ctx, runPrincipal("reg", 1), "reg", 1, apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero,
		Outputs: &apitypes.Outputs{Named: map[string]string{"cleaned": snap}}}); err != nil {
		t.Fatal(err)
	}
	if got := dataVersions(t, s, "cleaned-rows"); len(got) != 1 || got[0] != "1 reg/cleaned" {
		t.Errorf("versions of cleaned-rows: %q", got)
	}
	rec, err := s.st.GetJob(ctx, "reg")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec.Outputs, []byte(registerKey)) {
		t.Errorf("stored outputs still marked: %s", rec.Outputs)
	}
}

// TestOutputRegistrationInHistory: the record of a pipeline or a sweep
// has no log; what the registration of its outputs did is in its
// history, written with the mark's removal, so once: a start after it
// finds nothing owed.
func TestOutputRegistrationInHistory(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snap := putFile(t, s, "model")
	outputs := withPending([]byte(`{"named":{"best":"`+snap+`"}}`), []string{"best", "gone"})
	now := s.now()
	rec := store.Job{Name: "pipe", Compute: "local", Status: apitypes.StatusCompleted, CreatedBy: "owner",
		Spec:    []byte(`{"name":"pipe","outputs":{"best":{"name":"best-model","version":"1"},"gone":{"name":"gone-model"}}}`),
		Outputs: outputs, Created: now, Started: now, Ended: now}
	if _, err := s.st.CreateJob(ctx, rec, store.Event{Job: "pipe", Time: now, To: apitypes.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.reconcileRegistrations(ctx); err != nil {
			t.Fatal(err)
		}
		s.regs.scanned = false // as a server started again
	}
	if got := dataVersions(t, s, "best-model"); len(got) != 1 || got[0] != "1 pipe/best" {
		t.Errorf("versions of best-model: %q", got)
	}
	evs, err := s.st.ListEvents(ctx, "pipe")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs[1:] {
		if e.From != apitypes.StatusCompleted || e.To != apitypes.StatusCompleted {
			t.Errorf("a registration's event %s -> %s, want Completed -> Completed", e.From, e.To)
		}
		reasons = append(reasons, e.Reason)
	}
	want := []string{"output best registered as data asset azureml:best-model:1",
		"output gone is not registered as data asset gone-model: the job wrote nothing there"}
	if strings.Join(reasons, "\n") != strings.Join(want, "\n") {
		t.Errorf("history after the registration:\n%s\nwant:\n%s", strings.Join(reasons, "\n"), strings.Join(want, "\n"))
	}
}
