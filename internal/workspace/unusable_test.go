package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// logLines is a log the service writes to while the test reads it.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count is how many lines hold all of parts.
func (l *logLines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// An unusable compute once logged an ERROR line on every dispatcher pass,
// once a second for as long as it stayed unusable (issue 29). Now the log
// says it once per change: when it becomes unusable, when the reason
// changes, and when it is usable again; the same holds for a pool compute
// the pool loop fails.
func TestUnusableComputeIsLoggedOncePerChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	var logged logLines
	why := "" // what the target of compute edge fails with; "" makes it
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s, err := New(ctx, Config{
		PoolTypes: testPoolTypes,
		Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets: func(c *spec.Compute) (compute.Target, error) {
			if why != "" && c.Name == "edge" {
				return nil, errors.New(why)
			}
			return &fakeTarget{capacity: 1}, nil
		},
		Providers: func(*spec.Compute) (provider.Provider, error) { return &schedProvider{}, nil },
		Log:       slog.New(slog.NewTextHandler(&logged, nil)),
		Now:       clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	storeRawCompute(t, s, &spec.Compute{Name: "edge", Type: "local"})
	dispatchTimes := func(n int) {
		t.Helper()
		for range n {
			dispatch(t, s)
		}
	}
	unusable := func(reason string) int {
		return logged.count("level=ERROR", `msg="compute unusable"`, "compute=edge", reason)
	}

	why = "its kubeconfig is missing"
	dispatchTimes(5)
	if n := unusable("kubeconfig is missing"); n != 1 {
		t.Errorf("after 5 passes over the unusable compute: %d lines say so, want 1\n%s", n, logged.buf.String())
	}
	why = "its kubeconfig cannot be read"
	dispatchTimes(5)
	if n := unusable("kubeconfig cannot be read"); n != 1 {
		t.Errorf("after the reason changed: %d lines with the new reason, want 1\n%s", n, logged.buf.String())
	}
	why = ""
	dispatchTimes(3)
	if n := logged.count(`msg="compute usable again"`, "compute=edge"); n != 1 {
		t.Errorf("after the compute became usable: %d lines say so, want 1\n%s", n, logged.buf.String())
	}
	if n := unusable(""); n != 2 {
		t.Errorf("%d lines say the compute is unusable, want 2 (one per reason)\n%s", n, logged.buf.String())
	}

	// A pool compute whose stored spec is out of bounds: the pool loop
	// fails it and says so once, pass after pass.
	huge := 1 << 31
	storeRawCompute(t, s, &spec.Compute{Name: "big", Type: "amlcompute", Size: "Standard_DS1_v2",
		Tier: "dedicated", MinInstances: intp(0), MaxInstances: &huge, IdleTimeBeforeScaleDown: intp(120)})
	for range 5 {
		pass(t, s)
		dispatch(t, s)
	}
	if n := logged.count("level=ERROR", `msg="compute unusable"`, "compute=big", "max_instances"); n != 1 {
		t.Errorf("after 5 passes over the failed cluster: %d lines say it is unusable, want 1\n%s", n, logged.buf.String())
	}
}

// The nodes of a cluster the pool loop marks Failed are retired; the log
// once said "its compute was deleted" for them, sending whoever read it to
// look for a deletion that never happened (issue 29). It says the reason.
func TestNodeOfAFailedComputeIsRetiredWithTheReason(t *testing.T) {
	ctx := context.Background()
	s, prov, _ := newPaperCluster(t, 1, 2, 120)
	var logged logLines
	s.pools.log = slog.New(slog.NewTextHandler(&logged, nil))
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if n := len(liveMachines(prov)); n != 1 {
		t.Fatalf("%d machines before the cluster broke, want 1 (min_instances)", n)
	}

	// As a buggy or older server might have stored it.
	huge := 1 << 31
	if _, err := s.st.UpdateCompute(ctx, "gpu", func(c *store.Compute) error {
		var cs spec.Compute
		if err := json.Unmarshal(c.Spec, &cs); err != nil {
			return err
		}
		cs.MaxInstances = &huge
		c.Spec, _ = json.Marshal(&cs)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pass(t, s)

	if n := len(liveMachines(prov)); n != 0 {
		t.Errorf("%d machines left on the failed cluster, want 0", n)
	}
	if n := logged.count(`msg="node retired"`, "its compute is unusable", "max_instances"); n != 1 {
		t.Errorf("%d lines say the node was retired because its compute is unusable, want 1\n%s", n, logged.buf.String())
	}
	if n := logged.count("deleted"); n != 0 {
		t.Errorf("the log says a deletion that never happened:\n%s", logged.buf.String())
	}
}
