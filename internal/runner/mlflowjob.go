package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// mlflowShimSource is Ferry's stand-in for the mlflow package (standard
// library only): one file.
//
//go:embed python/mlflow/__init__.py
var mlflowShimSource []byte

// mlflowShimVersion names the stand-in's folder by its content, so that
// one written once serves every attempt on a node until Ferry's stand-in
// changes, and a runner of another version finds its own beside it.
var mlflowShimVersion = func() string {
	sum := sha256.Sum256(mlflowShimSource)
	return hex.EncodeToString(sum[:8])
}()

// MLflowShimDirName is the folder that holds the stand-ins by content
// hash: beside the node's environment cache (EnvCacheDir +
// MLflowShimSuffix), which the accounts jobs run as can reach, or, without
// one or where the job's account cannot reach it, in the attempt's own
// folder. Writing it into every attempt's folder made three inodes per
// attempt, a share of a small job's time (bench/dispatch).
const (
	MLflowShimDirName = "mlflow-shim"
	MLflowShimSuffix  = "-" + MLflowShimDirName
)

// verifiedShims holds, by the path of a stand-in's file, the file this
// process read back whole (os.FileInfo): a later attempt checks it with
// one stat, not a read.
var verifiedShims sync.Map

// installMLflowShim makes sure parent holds the stand-in in the folder
// named by its content hash, writing it when missing or not intact, and
// returns that folder, to put on PYTHONPATH. It is written into a
// temporary folder and renamed into place, so a concurrent runner never
// sees a partial one; it is not synced: one that a crash of the machine
// left empty or short is found so (shimIntact reads it back once per
// process) and written again.
func installMLflowShim(parent string) (string, error) {
	root := filepath.Join(parent, mlflowShimVersion)
	file := filepath.Join(root, "mlflow", "__init__.py")
	if shimIntact(file) {
		return root, nil
	}
	if _, err := os.Lstat(root); err == nil {
		// Damaged (edited, truncated): made again.
		if err := os.RemoveAll(root); err != nil {
			return "", fmt.Errorf("removing the damaged mlflow stand-in %s: %w", root, err)
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // once renamed, there is nothing left to remove
	if err := writeMLflowShim(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, root); err != nil && !shimIntact(file) {
		return "", fmt.Errorf("installing the mlflow stand-in in %s: %w", root, err)
	}
	// Another runner may have put it there first: either is whole.
	if !shimIntact(file) {
		return "", fmt.Errorf("the mlflow stand-in %s does not read back as written", file)
	}
	return root, nil
}

// writeMLflowShim writes the package into dir, readable by every account
// (a job may run as another), its file read-only.
func writeMLflowShim(dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "mlflow"), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "mlflow", "__init__.py"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(mlflowShimSource)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// shimIntact says whether file is the stand-in as embedded: read back once
// per process and file, then checked by its size, inode and mtime.
func shimIntact(file string) bool {
	fi, err := os.Lstat(file)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(mlflowShimSource)) {
		return false
	}
	if v, ok := verifiedShims.Load(file); ok && sameFile(v.(os.FileInfo), fi) {
		return true
	}
	data, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(data, mlflowShimSource) {
		return false
	}
	verifiedShims.Store(file, fi)
	return true
}

// sameFile: the same inode, unchanged since it was read.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// mlflowShimParent is where the node's stand-ins are: beside its
// environment cache, else beside its blob cache, else in the attempt's
// folder.
func (r *runner) mlflowShimParent() string {
	if base := cmp.Or(r.cfg.EnvCacheDir, r.cfg.CacheDir); base != "" {
		return base + MLflowShimSuffix
	}
	return filepath.Join(r.cfg.Dir, MLflowShimDirName)
}

// installNodeMLflowShim installs the stand-in where the node's runners
// share it, or, when that fails or the job's account cannot reach it, in
// the attempt's folder.
func (r *runner) installNodeMLflowShim() (string, error) {
	shim, err := installMLflowShim(r.mlflowShimParent())
	if err == nil && r.cfg.RunAs != nil {
		// The folders on the way, not the file: it is read, not passed.
		err = isolation.CheckReachable(filepath.Join(shim, "mlflow"), r.cfg.RunAs)
	}
	own := filepath.Join(r.cfg.Dir, MLflowShimDirName)
	if err != nil && r.mlflowShimParent() != own {
		r.log.Info("the node's mlflow stand-in cannot serve this job; it gets its own", "err", err)
		return installMLflowShim(own)
	}
	return shim, err
}

// newMLflowRun is the job's run for the endpoint's MLflow API, with the
// shim installed; the experiment is set when the job's spec is known
// (mlflowVars).
func (r *runner) newMLflowRun() *mlflowRun {
	shim, err := r.installNodeMLflowShim()
	if err != nil {
		r.log.Warn("no mlflow stand-in; a job without mlflow installed cannot import it", "err", err)
		shim = ""
	}
	r.mlflowShim = shim
	r.mlRun = &mlflowRun{
		job: r.cfg.Job, experiment: "Default", status: "RUNNING", started: time.Now(),
		artifactURI: (&url.URL{Scheme: "file", Path: filepath.Join(r.wd, "outputs")}).String(),
		setValues: func(ctx context.Context, v apitypes.RunValues) error {
			return r.c.SetRunValues(ctx, r.cfg.Job, v)
		},
		params: map[string]string{}, tags: map[string]string{}, metrics: map[string]mlflowMetric{},
	}
	return r.mlRun
}

// mlflowShimMounts are the folders a container job is shown read-only at
// their own path so that the stand-in on its PYTHONPATH is there: none
// when there is no stand-in or it is in the attempt's folder, which is
// mounted already.
func (r *runner) mlflowShimMounts() []string {
	if r.mlflowShim == "" || within(r.mlflowShim, r.cfg.Dir) {
		return nil
	}
	return []string{r.mlflowShim}
}

// within says whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
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
