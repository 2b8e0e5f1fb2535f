package slurm

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// Each launch leaves its handle in its attempt's folder; FindHandles
// finds them in one call, and says nothing of attempts never launched.
func TestFindHandlesOfLaunchedAttempts(t *testing.T) {
	s := testutil.RequireSlurm(t)
	tg := newTarget(t, s, nil)
	l1, name1 := job(t, map[string]string{"FAKE_SLEEP": "30"})
	l2, name2 := job(t, map[string]string{"FAKE_SLEEP": "30"})
	h1 := launch(t, tg, l1)
	h2 := launch(t, tg, l2)
	never := compute.Attempt{Job: name1, Attempt: 2}
	got, err := tg.FindHandles(context.Background(), []compute.Attempt{{Job: name1, Attempt: 1}, {Job: name2, Attempt: 1}, never, {Job: "bad name;", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[compute.Attempt]compute.Handle{{Job: name1, Attempt: 1}: h1, {Job: name2, Attempt: 1}: h2}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("handles found (-want +got):\n%s", d)
	}
	if got, err := tg.FindHandles(context.Background(), []compute.Attempt{never}); err != nil || len(got) != 0 {
		t.Errorf("an attempt never launched: %v, %v; want nothing found and no error", got, err)
	}

	// The tasks of an array, each in its own attempt's folder.
	l3, name3 := job(t, map[string]string{"FAKE_SLEEP": "30"})
	l4, name4 := job(t, map[string]string{"FAKE_SLEEP": "30"})
	rs := tg.LaunchBatch(context.Background(), []compute.Launch{l3, l4})
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		t.Cleanup(func() { _ = tg.Cancel(context.Background(), r.Handle) })
	}
	got, err = tg.FindHandles(context.Background(), []compute.Attempt{{Job: name3, Attempt: 1}, {Job: name4, Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want = map[compute.Attempt]compute.Handle{{Job: name3, Attempt: 1}: rs[0].Handle, {Job: name4, Attempt: 1}: rs[1].Handle}
	if d := cmp.Diff(want, got); d != "" || !strings.Contains(string(rs[1].Handle), "_1") {
		t.Errorf("handles of an array's tasks %v; found (-want +got):\n%s", rs, d)
	}
}
