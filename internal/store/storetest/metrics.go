package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunMetrics runs the suite of store.Metrics: metric values, params and tags.
// It needs store.Jobs too: what it stores is of a job, which must exist.
// open is as for Run.
func RunMetrics[S metricStore](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) metricStore { return open(t) }, []test[metricStore]{
		{"Metrics/AddList", testMetricsAddList},
		{"Metrics/Latest", testMetricsLatest},
		{"Metrics/LatestOf", testMetricsLatestOf},
		{"Metrics/SpecialValues", testMetricsSpecialValues},
		{"Metrics/Empty", testMetricsEmpty},
		{"Metrics/NotFound", testMetricsNotFound},
		{"Metrics/NumberedOnce", testMetricsNumberedOnce},

		{"RunValues", testRunValues},
	})
}

// metricStore is what RunMetrics needs: the metrics, and the jobs they are
// of.
type metricStore interface {
	store.Jobs
	store.Metrics
}

func mustAddMetrics(t *testing.T, s store.Metrics, job string, ms ...store.Metric) {
	t.Helper()
	if err := s.AddMetrics(context.Background(), job, ms); err != nil {
		t.Fatalf("AddMetrics(%q): %v", job, err)
	}
}

func mustListMetrics(t *testing.T, s store.Metrics, job, name string) []store.Metric {
	t.Helper()
	ms, err := s.ListMetrics(context.Background(), job, name)
	if err != nil {
		t.Fatalf("ListMetrics(%q, %q): %v", job, name, err)
	}
	return ms
}

func mustLatestMetrics(t *testing.T, s store.Metrics, job string) map[string]store.Metric {
	t.Helper()
	ms, err := s.LatestMetrics(context.Background(), job)
	if err != nil {
		t.Fatalf("LatestMetrics(%q): %v", job, err)
	}
	return ms
}

func metric(name string, v float64, step int64) store.Metric {
	return store.Metric{Name: name, Value: v, Step: step, Time: t0.Add(time.Duration(step) * time.Second)}
}

func testMetricsAddList(t *testing.T, s metricStore) {
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	batch1 := []store.Metric{metric("loss", 2.5, 0), metric("acc", 0.1, 0), metric("loss", 1.25, 1)}
	batch2 := []store.Metric{metric("acc", 0.5, 1), metric("loss", 0.625, 2)}
	mustAddMetrics(t, s, "j1", batch1...)
	mustAddMetrics(t, s, "j2", metric("loss", 99, 0))
	mustAddMetrics(t, s, "j1", batch2...)

	all := append(append([]store.Metric{}, batch1...), batch2...)
	if d := diff(all, mustListMetrics(t, s, "j1", "")); d != "" {
		t.Errorf("ListMetrics(all) (-want +got):\n%s", d)
	}
	wantLoss := []store.Metric{batch1[0], batch1[2], batch2[1]}
	if d := diff(wantLoss, mustListMetrics(t, s, "j1", "loss")); d != "" {
		t.Errorf("ListMetrics(loss) (-want +got):\n%s", d)
	}
	if d := diff([]store.Metric{metric("loss", 99, 0)}, mustListMetrics(t, s, "j2", "")); d != "" {
		t.Errorf("ListMetrics(j2) (-want +got):\n%s", d)
	}
	if ms := mustListMetrics(t, s, "j1", "f1"); ms == nil || len(ms) != 0 {
		t.Errorf("ListMetrics of a metric never logged = %#v, want an empty, non-nil slice", ms)
	}
}

// A runner that sends a numbered batch again (its answer was lost, the
// server restarted) gets each value stored once; attempts and the
// runners of an attempt's nodes number apart.
func testMetricsNumberedOnce(t *testing.T, s metricStore) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	m := func(i int) store.Metric { return metric("loss", float64(i), int64(i)) }
	add := func(attempt, rank int, first int64, ms ...store.Metric) {
		t.Helper()
		high, err := s.AddNumberedMetrics(ctx, "j1", attempt, rank, first, ms)
		if err != nil {
			t.Fatalf("AddNumberedMetrics(attempt %d, first %d): %v", attempt, first, err)
		}
		if want := first + int64(len(ms)) - 1; high < want {
			t.Fatalf("AddNumberedMetrics(attempt %d, first %d) = %d, want at least %d", attempt, first, high, want)
		}
	}
	add(1, 0, 1, m(1), m(2))
	add(1, 0, 1, m(1), m(2))       // the same batch again
	add(1, 0, 2, m(2), m(3), m(4)) // overlapping the stored ones
	add(2, 0, 1, m(10))            // another attempt numbers from 1
	add(1, 1, 1, m(20))            // so does the runner of another node
	add(1, 0, 5, m(5))
	want := []store.Metric{m(1), m(2), m(3), m(4), m(10), m(20), m(5)}
	if d := diff(want, mustListMetrics(t, s, "j1", "")); d != "" {
		t.Errorf("ListMetrics (-want +got):\n%s", d)
	}
	if _, err := s.AddNumberedMetrics(ctx, "nope", 1, 0, 1, []store.Metric{m(1)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddNumberedMetrics of a missing job = %v, want ErrNotFound", err)
	}
}

func testMetricsLatest(t *testing.T, s metricStore) {
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	mustAddMetrics(t, s, "j1", metric("loss", 3, 10), metric("acc", 0.2, 10), metric("loss", 2, 11))
	mustAddMetrics(t, s, "j2", metric("loss", 99, 50))
	// Added last, with a lower step: "last" is the order of adding.
	mustAddMetrics(t, s, "j1", metric("loss", 1, 5))
	want := map[string]store.Metric{
		"loss": metric("loss", 1, 5),
		"acc":  metric("acc", 0.2, 10),
	}
	if d := diff(want, mustLatestMetrics(t, s, "j1")); d != "" {
		t.Errorf("LatestMetrics (-want +got):\n%s", d)
	}
}

func testMetricsLatestOf(t *testing.T, s metricStore) {
	ctx := context.Background()
	var names []string
	// More jobs than an implementation may bind into one query.
	for i := range 1200 {
		names = append(names, fmt.Sprintf("j%04d", i))
		mustCreateJob(t, s, testJob(names[i]))
	}
	mustAddMetrics(t, s, "j0000", metric("loss", 3, 10), metric("acc", 0.2, 10), metric("loss", 2, 11))
	mustAddMetrics(t, s, "j0007", metric("loss", 99, 50))
	mustAddMetrics(t, s, "j1100", metric("loss", math.NaN(), 1))
	mustAddMetrics(t, s, "j0000", metric("loss", 1, 5))
	got, err := s.LatestMetricsOf(ctx, append(names, "nope"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]store.Metric{}
	for _, n := range []string{"j0000", "j0007", "j1100"} {
		want[n] = mustLatestMetrics(t, s, n)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("LatestMetricsOf (-want +got):\n%s", d)
	}
	if got, err := s.LatestMetricsOf(ctx, nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("LatestMetricsOf(nil) = %#v, %v; want an empty, non-nil map", got, err)
	}
}

func testMetricsSpecialValues(t *testing.T, s metricStore) {
	mustCreateJob(t, s, testJob("j1"))
	want := []store.Metric{
		metric("loss", math.NaN(), 0),
		metric("loss", math.Inf(1), 1),
		metric("loss", math.Inf(-1), 2),
		metric("loss", 0, 3),
		metric("loss", -1e-300, 4),
		{Name: "loss", Value: math.MaxFloat64, Step: math.MaxInt64, Time: t0},
		{Name: "untimed", Value: 1, Step: -1},
	}
	mustAddMetrics(t, s, "j1", want...)
	got := mustListMetrics(t, s, "j1", "")
	if d := diff(want, got); d != "" {
		t.Errorf("ListMetrics (-want +got):\n%s", d)
	}
	for _, m := range got {
		if !m.Time.IsZero() && m.Time.Location() != time.UTC {
			t.Errorf("metric time %v is not in UTC", m.Time)
		}
	}
	if d := diff(want[len(want)-1], mustLatestMetrics(t, s, "j1")["untimed"]); d != "" {
		t.Errorf("LatestMetrics (-want +got):\n%s", d)
	}
}

func testMetricsEmpty(t *testing.T, s metricStore) {
	mustCreateJob(t, s, testJob("j1"))
	mustAddMetrics(t, s, "j1")
	if ms := mustListMetrics(t, s, "j1", ""); ms == nil || len(ms) != 0 {
		t.Errorf("ListMetrics of a job without metrics = %#v, want an empty, non-nil slice", ms)
	}
	if ms := mustLatestMetrics(t, s, "j1"); ms == nil || len(ms) != 0 {
		t.Errorf("LatestMetrics of a job without metrics = %#v, want an empty, non-nil map", ms)
	}
}

func testMetricsNotFound(t *testing.T, s metricStore) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	wantErrIs(t, "AddMetrics to a missing job", s.AddMetrics(ctx, "nope", []store.Metric{metric("loss", 1, 0)}), store.ErrNotFound)
	wantErrIs(t, "AddMetrics of nothing to a missing job", s.AddMetrics(ctx, "nope", nil), store.ErrNotFound)
	_, err := s.ListMetrics(ctx, "nope", "")
	wantErrIs(t, "ListMetrics of a missing job", err, store.ErrNotFound)
	_, err = s.ListMetrics(ctx, "nope", "loss")
	wantErrIs(t, "ListMetrics(loss) of a missing job", err, store.ErrNotFound)
	_, err = s.LatestMetrics(ctx, "nope")
	wantErrIs(t, "LatestMetrics of a missing job", err, store.ErrNotFound)
}

// testRunValues: params and tags keep the last value per kind and key,
// per job, and a missing job is ErrNotFound.
func testRunValues(t *testing.T, s metricStore) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	if vs, err := s.ListRunValues(ctx, "j1"); err != nil || vs == nil || len(vs) != 0 {
		t.Fatalf("ListRunValues of a job without any = %#v, %v; want an empty, non-nil slice", vs, err)
	}
	set := func(job string, vs ...store.RunValue) {
		t.Helper()
		if err := s.SetRunValues(ctx, job, vs); err != nil {
			t.Fatalf("SetRunValues(%s): %v", job, err)
		}
	}
	set("j1", store.RunValue{Kind: "param", Key: "lr", Value: "0.1"}, store.RunValue{Kind: "tag", Key: "lr", Value: "tagged"})
	set("j2", store.RunValue{Kind: "param", Key: "lr", Value: "9"})
	set("j1", store.RunValue{Kind: "param", Key: "lr", Value: "0.01"}, store.RunValue{Kind: "param", Key: "epochs", Value: "3"})
	want := []store.RunValue{{Kind: "param", Key: "epochs", Value: "3"}, {Kind: "param", Key: "lr", Value: "0.01"}, {Kind: "tag", Key: "lr", Value: "tagged"}}
	got, err := s.ListRunValues(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("ListRunValues (-want +got):\n%s", d)
	}
	wantErrIs(t, "SetRunValues of a missing job", s.SetRunValues(ctx, "nope", []store.RunValue{{Kind: "param", Key: "a", Value: "b"}}), store.ErrNotFound)
	_, err = s.ListRunValues(ctx, "nope")
	wantErrIs(t, "ListRunValues of a missing job", err, store.ErrNotFound)
}
