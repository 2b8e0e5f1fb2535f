package batch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// upload stores files as a snapshot of the workspace, as the CLI's
// upload would, and returns its id.
func upload(t *testing.T, h *workloadtest.Harness, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, blobs, err := snapshot.Build(dir, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.WS.StoreSnapshot(m, blobs, "the test's files")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func deployment(t *testing.T, doc string) *spec.BatchDeployment {
	t.Helper()
	d, err := spec.ParseBatchDeployment([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An invocation is one ordinary job on the deployment's compute: it
// runs the batch driver, stored once as a snapshot, with the
// deployment's script over the uploaded data; the endpoint lists it, and
// the core dispatches it as any job.
func TestBatchInvocationIsAJobTheEndpointLists(t *testing.T) {
	h := workloadtest.New(t, 4)
	b := New(h.WS, h.Store, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if _, err := b.CreateEndpoint(ctx, workloadtest.Owner, &spec.BatchEndpoint{Name: "scorer"}); err != nil {
		t.Fatal(err)
	}
	code := upload(t, h, map[string]string{"score.py": "def init():\n    pass\n\ndef run(mini_batch):\n    return mini_batch\n"})
	blue := deployment(t, "name: blue\nendpoint_name: scorer\ncompute: local\ncode_configuration:\n  code: src\n  scoring_script: score.py\n")
	v, err := b.CreateDeployment(ctx, workloadtest.Owner, blue, apitypes.DeploymentUploads{CodeSnapshot: code}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Default {
		t.Errorf("the endpoint's first deployment is not its default: %+v", v)
	}

	data := upload(t, h, map[string]string{"a.txt": "1"})
	var jobs []string
	for range 2 {
		j, err := b.Invoke(ctx, workloadtest.Owner, "scorer", apitypes.BatchInvocation{Snapshot: data})
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != apitypes.StatusQueued || j.ExperimentName != "batch-scorer" || !strings.HasPrefix(j.Name, "scorer-") {
			t.Errorf("job %s: %s in experiment %q; want Queued in batch-scorer", j.Name, j.Status, j.ExperimentName)
		}
		if !strings.Contains(j.Spec.Command, "--script 'score.py'") || j.Spec.Tags["ferry.batch_deployment"] != "blue" {
			t.Errorf("job %s: command %q, tags %v; want the driver with blue's script", j.Name, j.Spec.Command, j.Spec.Tags)
		}
		driver := j.InputSnapshots["ferry_batch_driver"]
		if !h.WS.HasBlob(driver) || j.InputSnapshots["data"] != data {
			t.Errorf("job %s: inputs %v; want the stored driver and the data", j.Name, j.InputSnapshots)
		}
		jobs = append(jobs, j.Name)
	}
	first, second := h.Job(t, jobs[0]), h.Job(t, jobs[1])
	if first.InputSnapshots["ferry_batch_driver"] != second.InputSnapshots["ferry_batch_driver"] {
		t.Errorf("the driver was stored twice: %v, %v", first.InputSnapshots, second.InputSnapshots)
	}

	listed, err := b.ListJobs(ctx, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range listed {
		names = append(names, j.Name)
	}
	if want := []string{jobs[1], jobs[0]}; !slices.Equal(names, want) {
		t.Errorf("list-jobs: %v; want %v, newest first", names, want)
	}

	h.Pass(t, "dispatch")
	if got := h.Target.Launched(); !slices.Equal(got, jobs) {
		t.Errorf("launched %v; want the invocations' jobs %v", got, jobs)
	}
}

// The endpoint's default deployment cannot go while the endpoint has
// others; once it is the last one, it can, and the endpoint then has no
// default, which an invocation without a deployment names.
func TestBatchDefaultDeploymentGoesLast(t *testing.T) {
	h := workloadtest.New(t, 1)
	b := New(h.WS, h.Store, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if _, err := b.CreateEndpoint(ctx, workloadtest.Owner, &spec.BatchEndpoint{Name: "scorer"}); err != nil {
		t.Fatal(err)
	}
	code := upload(t, h, map[string]string{"score.py": "def run(mini_batch):\n    return mini_batch\n"})
	for _, name := range []string{"blue", "green"} {
		d := deployment(t, "name: "+name+"\nendpoint_name: scorer\ncompute: local\ncode_configuration:\n  code: src\n  scoring_script: score.py\n")
		if _, err := b.CreateDeployment(ctx, workloadtest.Owner, d, apitypes.DeploymentUploads{CodeSnapshot: code}, false); err != nil {
			t.Fatal(err)
		}
	}
	err := b.DeleteDeployment(ctx, workloadtest.Owner, "scorer", "blue")
	if apperr.CodeOf(err) != apperr.CodeConflict || !strings.Contains(err.Error(), "make another the default first") {
		t.Fatalf("deleting the default while green is there: %v", err)
	}
	for _, name := range []string{"green", "blue"} {
		if err := b.DeleteDeployment(ctx, workloadtest.Owner, "scorer", name); err != nil {
			t.Fatalf("deleting %s: %v", name, err)
		}
	}
	e, err := b.GetEndpoint(ctx, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	if e.DefaultDeployment() != "" || len(e.Deployments) != 0 {
		t.Errorf("endpoint after its last deployment went: %+v", e)
	}
	_, err = b.Invoke(ctx, workloadtest.Owner, "scorer", apitypes.BatchInvocation{Path: "azureml:numbers:1"})
	if apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "has no default deployment") {
		t.Errorf("invoking an endpoint without a default: %v", err)
	}
}
