package runner

import (
	"cmp"
	"context"
	_ "embed"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// mlflowShimSource is Ferry's stand-in for the mlflow package (standard
// library only): one file, so that a job pays one small write for it.
//
//go:embed python/mlflow/__init__.py
var mlflowShimSource []byte

// MLflowShimDirName is the folder in an attempt's directory that holds the
// shim package; it goes last on the job's PYTHONPATH. The attempt's folder
// is mounted in a container job at the same path, so the path holds there
// too.
const MLflowShimDirName = "mlflow-shim"

// installMLflowShim writes the shim package under dir and returns the
// folder to put on PYTHONPATH.
func installMLflowShim(dir string) (string, error) {
	root := filepath.Join(dir, MLflowShimDirName)
	if err := os.MkdirAll(filepath.Join(root, "mlflow"), 0o755); err != nil {
		return "", err
	}
	return root, os.WriteFile(filepath.Join(root, "mlflow", "__init__.py"), mlflowShimSource, 0o644)
}

// newMLflowRun is the job's run for the endpoint's MLflow API, with the
// shim installed; the experiment is set when the job's spec is known
// (mlflowVars).
func (r *runner) newMLflowRun() *mlflowRun {
	shim, err := installMLflowShim(r.cfg.Dir)
	if err != nil {
		r.log.Warn("no mlflow stand-in; a job without mlflow installed cannot import it", "err", err)
		shim = ""
	}
	r.mlflowShim = shim
	r.mlRun = &mlflowRun{
		job: r.cfg.Job, experiment: "Default", status: "RUNNING", started: time.Now(),
		artifactURI: (&url.URL{Scheme: "file", Path: filepath.Join(r.wd, "outputs")}).String(),
		setValues: func(ctx context.Context, v workspace.RunValues) error {
			return r.c.SetRunValues(ctx, r.cfg.Job, v)
		},
		params: map[string]string{}, tags: map[string]string{}, metrics: map[string]mlflowMetric{},
	}
	return r.mlRun
}

// mlflowVars are the variables a job's MLflow client reads, as Azure sets
// them, pointing at the runner's endpoint, and PYTHONPATH ending with the
// shim; basePath is the PYTHONPATH the job has without it. A job that
// names its own MLFLOW_TRACKING_URI keeps it and gets none of them.
func (r *runner) mlflowVars(j *spec.Job, basePath string) []string {
	if r.mlRun == nil || r.jobAPI == "" {
		return nil
	}
	if _, own := j.EnvironmentVariables["MLFLOW_TRACKING_URI"]; own {
		return nil
	}
	exp := cmp.Or(j.EnvironmentVariables["MLFLOW_EXPERIMENT_NAME"], j.ExperimentName, "Default")
	r.mlRun.mu.Lock()
	r.mlRun.experiment = exp
	r.mlRun.mu.Unlock()
	vars := []string{
		"MLFLOW_TRACKING_URI=" + r.jobAPI,
		"MLFLOW_RUN_ID=" + r.cfg.Job,
		"MLFLOW_EXPERIMENT_NAME=" + exp,
		"MLFLOW_TRACKING_TOKEN=" + r.cfg.RunToken,
	}
	if r.mlflowShim != "" {
		if p, ok := j.EnvironmentVariables["PYTHONPATH"]; ok {
			basePath = p
		}
		var parts []string
		for _, p := range strings.Split(basePath, string(filepath.ListSeparator)) {
			if p != "" {
				parts = append(parts, p)
			}
		}
		vars = append(vars, "PYTHONPATH="+strings.Join(append(parts, r.mlflowShim), string(filepath.ListSeparator)))
	}
	return vars
}
