package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// batchDeploymentRow is one of a batch endpoint's deployments as its page
// shows it: the scoring settings `ferry batch-deployment show` has, with
// the defaults the file left out filled in as the driver takes them.
type batchDeploymentRow struct {
	*apitypes.BatchDeployment
	Model, Compute, ErrorThreshold, OutputAction string
	InstanceCount, MiniBatchSize, MaxConcurrency int
}

func batchDeploymentRowOf(d *apitypes.BatchDeployment) batchDeploymentRow {
	row := batchDeploymentRow{BatchDeployment: d, Model: "none", InstanceCount: 1, MiniBatchSize: 10, MaxConcurrency: 1,
		ErrorThreshold: "-1 (no limit)", OutputAction: "append_row"}
	s := d.BatchDeployment
	if s == nil {
		return row
	}
	switch m := s.Model; {
	case m == nil:
	case m.Ref != "":
		row.Model = m.Ref
	case m.Name != "":
		row.Model = m.Name + " (inline)"
		if m.Version != "" {
			row.Model = m.Name + ":" + m.Version + " (inline)"
		}
	default:
		row.Model = "inline"
	}
	row.Compute = s.ComputeName()
	if s.Resources != nil && s.Resources.InstanceCount > 0 {
		row.InstanceCount = s.Resources.InstanceCount
	}
	if s.MiniBatchSize > 0 {
		row.MiniBatchSize = s.MiniBatchSize
	}
	if s.MaxConcurrencyPerInstance > 0 {
		row.MaxConcurrency = s.MaxConcurrencyPerInstance
	}
	if s.ErrorThreshold != nil && *s.ErrorThreshold >= 0 {
		row.ErrorThreshold = fmt.Sprint(*s.ErrorThreshold)
	}
	if s.OutputAction != "" {
		row.OutputAction = s.OutputAction
	}
	if row.OutputAction == "append_row" {
		name := s.OutputFileName
		if name == "" {
			name = "predictions.csv"
		}
		row.OutputAction += " (" + name + ")"
	}
	return row
}

// batchJobRow is one of a batch endpoint's jobs with its progress, from
// the metrics its driver logs (mini_batches_done, _failed, _left); Progress
// is empty before the driver logged any.
type batchJobRow struct {
	*apitypes.Job
	Deployment string
	Progress   string
}

func batchJobRowOf(endpoint string, j *apitypes.Job) batchJobRow {
	// The job's display name is "ENDPOINT/DEPLOYMENT batch scoring"
	// (InvokeBatchEndpoint), and the list has no spec to read its tags.
	dep, ok := strings.CutPrefix(j.DisplayName, endpoint+"/")
	dep, ok2 := strings.CutSuffix(dep, " batch scoring")
	row := batchJobRow{Job: j}
	if ok && ok2 {
		row.Deployment = dep
	}
	done, okDone := metricCount(j.Metrics, "mini_batches_done")
	failed, okFailed := metricCount(j.Metrics, "mini_batches_failed")
	left, okLeft := metricCount(j.Metrics, "mini_batches_left")
	if okDone || okFailed || okLeft {
		row.Progress = fmt.Sprintf("%d done, %d failed, %d left", done, failed, left)
	}
	return row
}

func metricCount(m map[string]float64, name string) (int64, bool) {
	v, ok := m[name]
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return int64(v), true
}

// batchView is a batch endpoint's page.
type batchView struct {
	*apitypes.BatchEndpoint
	Default     string
	Deployments []batchDeploymentRow
	Jobs        []batchJobRow
	// The invoke form: what was entered and what is wrong with it.
	Input, InputType, Deployment, JobName string
	InputError, FormError                 string
}

func (s *Studio) batchView(ctx context.Context, ss *session, name string) (*batchView, error) {
	e, err := ss.api.GetBatchEndpoint(ctx, name)
	if err != nil {
		return nil, err
	}
	deps, err := ss.api.ListBatchDeployments(ctx, name)
	if err != nil {
		return nil, err
	}
	jobs, err := ss.api.ListBatchJobs(ctx, name)
	if err != nil {
		return nil, err
	}
	v := &batchView{BatchEndpoint: e, InputType: "uri_folder"}
	if e.BatchEndpoint != nil {
		v.Default = e.DefaultDeployment()
	}
	for _, d := range deps {
		v.Deployments = append(v.Deployments, batchDeploymentRowOf(d))
	}
	sort.Slice(v.Deployments, func(a, b int) bool { return v.Deployments[a].Name < v.Deployments[b].Name })
	for _, j := range jobs {
		v.Jobs = append(v.Jobs, batchJobRowOf(name, j))
	}
	return v, nil
}

func (s *Studio) batchDetail(w http.ResponseWriter, r *http.Request, ss *session) error {
	v, err := s.batchView(r.Context(), ss, r.PathValue("name"))
	if err != nil {
		return err
	}
	s.render(w, r, ss, "batchendpoint", "Batch endpoint "+v.Name, v)
	return nil
}

// checkBatchInput says what is wrong with the invoke form's input, which
// must be something the API resolves itself: a registered data asset
// (azureml:NAME:VERSION, azureml:NAME@latest) or a remote URI (a
// datastore's azureml://datastores/..., https://, wasbs://, ...). A local
// path would need an upload, which only the CLI does.
func checkBatchInput(in string) string {
	switch {
	case in == "":
		return "input: is required: a data asset (azureml:NAME:VERSION or azureml:NAME@latest) or a datastore URI (azureml://datastores/NAME/paths/PATH)"
	case spec.IsDataRef(in):
		if _, _, err := spec.ParseDataRef(in); err != nil {
			return "input: " + err.Error()
		}
	case spec.IsRemotePath(in):
		if _, err := spec.ParseDataURI(in); err != nil {
			return "input: " + err.Error()
		}
	default:
		return fmt.Sprintf("input: %q is a local path, which the studio cannot upload; register it as a data asset (ferry data create) and give azureml:NAME:VERSION, or invoke with ferry batch-endpoint invoke --input", in)
	}
	return ""
}

// batchInvoke starts a batch scoring job from the invoke form through the
// API (POST /v1/batch-endpoints/{name}/jobs, what `ferry batch-endpoint
// invoke` calls) and goes to the job's page; a refusal is shown beside
// the field it names.
func (s *Studio) batchInvoke(w http.ResponseWriter, r *http.Request, ss *session) error {
	ctx, name := r.Context(), r.PathValue("name")
	v, err := s.batchView(ctx, ss, name)
	if err != nil {
		return err
	}
	f := r.PostForm
	v.Input = strings.TrimSpace(f.Get("input"))
	v.InputType = f.Get("type")
	v.Deployment = f.Get("deployment")
	v.JobName = strings.TrimSpace(f.Get("job_name"))
	if v.InputType != "uri_folder" && v.InputType != "uri_file" {
		v.FormError = fmt.Sprintf("type: %q is not uri_folder or uri_file", v.InputType)
		v.InputType = "uri_folder"
	}
	if v.InputError = checkBatchInput(v.Input); v.InputError == "" && v.FormError == "" {
		job, err := ss.api.InvokeBatchEndpoint(ctx, name, apitypes.BatchInvocation{
			Deployment: v.Deployment, Type: v.InputType, Path: v.Input, JobName: v.JobName})
		if err == nil {
			http.Redirect(w, r, "/studio/jobs/"+url.PathEscape(job.Name), http.StatusSeeOther)
			return nil
		}
		if st := client.StatusOf(err); st == 0 || st >= 500 || st == http.StatusUnauthorized {
			return err
		}
		// The API names the field: inputs.data.path and input.* are the
		// input's; anything else (the deployment, the job's name, a
		// refusal of the token) is the form's.
		msg := err.Error()
		if strings.Contains(msg, "inputs.data") || strings.Contains(msg, "input:") || strings.Contains(msg, "input.") ||
			strings.Contains(msg, "data asset") {
			v.InputError = msg
		} else {
			v.FormError = msg
		}
	}
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "batchendpoint", "Batch endpoint "+name, v)
	return nil
}
