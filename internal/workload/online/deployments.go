package online

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Online deployments (Azure ML v2 managedOnlineDeployment): the replicas
// that serve an endpoint's requests. A replica is a job: Ferry's inference
// server (internal/serving/inferenceserver) running the deployment's
// scoring script in its environment, placed like any job: on pool nodes of
// the deployment's instance_type (the serverless cluster of that size), or
// on this machine's local target for `--local`. So replicas get the
// agents, runner, environment cache, log shipping, leases and cancel that
// jobs have, and a replica lost with its node ends as its job does. The
// deployment controller (deployctl.go) keeps the replica jobs at the
// count the deployment wants, probes them, routes the ready ones, rolls
// updates and scales.

func statsOf(l DeploymentLoad) *apitypes.DeploymentStats {
	return &apitypes.DeploymentStats{Requests: l.Requests, Errors: l.Errors,
		P50MS: float64(l.P50.Microseconds()) / 1000, P99MS: float64(l.P99.Microseconds()) / 1000}
}

// deploymentDoc is what the store keeps of a deployment (its Spec
// column).
type deploymentDoc struct {
	Spec *spec.OnlineDeployment `json:"spec"`
	// ID is random, made at create: it names the replica jobs, so that a
	// deployment deleted and made again does not meet its old jobs.
	ID      string `json:"id"`
	Compute string `json:"compute"`
	Local   bool   `json:"local,omitempty"`
	ModelID string `json:"model_id,omitempty"`
	// ModelFolder is the name of a model registered (or given inline) as
	// a folder: AZUREML_MODEL_DIR holds the folder under it, as Azure's
	// does; empty for a model that is a file, which is there by its own
	// name.
	ModelFolder string `json:"model_folder,omitempty"`
	apitypes.DeploymentUploads
	// Generation counts the deployment's specs: an update that changes
	// what replicas run makes a new generation, rolled out beside the old.
	Generation int `json:"generation"`
	// Kube says the deployment runs on the Kubernetes compute Compute
	// (its endpoint's), in image KubeImage, or in the image Ferry builds
	// of environment KubeBuild and pushes to the compute's registry
	// (kubedeploy.go).
	Kube      bool              `json:"kube,omitempty"`
	KubeImage string            `json:"kube_image,omitempty"`
	KubeBuild *environment.Spec `json:"kube_build,omitempty"`
}

// replicaSet is the store's record of a deployment's replica jobs (its
// Replicas column).
type replicaSet struct {
	Next     int          `json:"next"` // the next replica's number
	Replicas []replicaRec `json:"replicas"`
	// Target is how many replicas autoscale wants (target_utilization);
	// kept so that a restarted server does not scale from scratch.
	Target *int `json:"target,omitempty"`
	// Failures counts replicas of the current generation that ended
	// before they were ever ready, since the last one that was.
	Failures int `json:"failures,omitempty"`
}

type replicaRec struct {
	Job        string `json:"job"`
	Generation int    `json:"generation"`
	// Submitted is false between the record of its name and the job's
	// creation; a server stopped in between creates it at its next pass.
	Submitted bool `json:"submitted,omitempty"`
}

// DeploymentChange is an update's options beyond the file.
type DeploymentChange struct {
	Uploads apitypes.DeploymentUploads
}

func decodeDeployment(rec store.Deployment) (*deploymentDoc, *replicaSet, error) {
	var doc deploymentDoc
	if err := json.Unmarshal(rec.Spec, &doc); err != nil || doc.Spec == nil {
		return nil, nil, fmt.Errorf("deployment %s/%s: stored spec: %v", rec.Endpoint, rec.Name, err)
	}
	var set replicaSet
	if len(rec.Replicas) > 0 {
		if err := json.Unmarshal(rec.Replicas, &set); err != nil {
			return nil, nil, fmt.Errorf("deployment %s/%s: stored replicas: %w", rec.Endpoint, rec.Name, err)
		}
	}
	return &doc, &set, nil
}

func encodeDeployment(rec *store.Deployment, doc *deploymentDoc, set *replicaSet) error {
	var err error
	if rec.Spec, err = json.Marshal(doc); err != nil {
		return err
	}
	rec.Replicas, err = json.Marshal(set)
	return err
}

func newDeploymentID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // crypto/rand does not fail (Go 1.24+)
	return hex.EncodeToString(b)
}

// resolveDeployment checks what a deployment refers to (its endpoint, its
// model, its environment, its snapshots, where it runs) and fills doc.
// prev is the deployment's current doc when d updates it (nil on
// create): an update keeps it on the kind of node it runs on.
func (s *Service) resolveDeployment(ctx context.Context, d *spec.OnlineDeployment, up apitypes.DeploymentUploads, local bool, prev, doc *deploymentDoc) error {
	erec, err := s.getEndpointRecord(ctx, d.EndpointName)
	if err != nil {
		return err
	}
	ep, err := endpointSpecOf(erec)
	if err != nil {
		return err
	}
	if kubeEndpointCompute(ep) == "" && d.SchemaKind() == "kubernetes" {
		return apperr.Invalid("$schema: a kubernetesOnlineDeployment runs on the Kubernetes compute of its endpoint, and endpoint %s names none; create the endpoint with compute: azureml:NAME (a kubernetes compute), or use the managedOnlineDeployment schema", d.EndpointName)
	}
	kubeCompute := deploymentKubeCompute(ep, d)
	if prev != nil && (kubeCompute != "") != prev.Kube {
		where, to := "on pool nodes ("+prev.Compute+")", "to the endpoint's kubernetes compute"
		if prev.Kube {
			where, to = "on kubernetes compute "+prev.Compute, "to pool nodes"
		}
		return apperr.Invalid("$schema: deployment %s runs %s, and an update does not move it %s; keep its $schema, or create a deployment of the other kind beside it and move the traffic to it", d.Name, where, to)
	}
	if up.CodeSnapshot == "" {
		return apperr.Invalid("code_configuration.code: %q was not uploaded with the deployment (ferry online-deployment create uploads it)", d.CodeConfiguration.Code)
	}
	if err := s.core.RequireSnapshot(up.CodeSnapshot, "code_configuration.code"); err != nil {
		return err
	}
	doc.ModelID, doc.ModelFolder = "", ""
	var modelName string
	switch m := d.Model; {
	case m == nil:
		if up.ModelSnapshot != "" {
			return apperr.Invalid("model_snapshot: the deployment has no model, but model files were uploaded")
		}
	case m.Ref != "":
		model, err := s.core.ResolveModel(ctx, m.Ref)
		if err != nil {
			var we *apperr.Error
			if errors.As(err, &we) {
				we.Msg = "model: " + we.Msg
			}
			return err
		}
		if model.Archived && !strings.Contains(m.Ref, ":") {
			return apperr.Invalid("model: %s is archived", model.ID)
		}
		up.ModelSnapshot = model.Snapshot
		doc.ModelID, modelName = model.ID, model.PathName
	default:
		if up.ModelSnapshot == "" {
			return apperr.Invalid("model.path: %q was not uploaded with the deployment (ferry online-deployment create uploads it)", m.Path)
		}
		if err := s.core.RequireSnapshot(up.ModelSnapshot, "model.path"); err != nil {
			return err
		}
		modelName = assets.ModelPathName(m.Path)
	}
	if up.ModelSnapshot != "" && modelName != "" {
		m, err := s.core.ReadSnapshot(up.ModelSnapshot)
		if err != nil {
			return err
		}
		if len(m.Files) != 1 || m.Files[0].Path != modelName {
			doc.ModelFolder = modelName
		}
	}
	env, err := s.core.ResolveEnvironment(ctx, d.Environment, up.EnvironmentSnapshot)
	if err != nil {
		return err
	}
	doc.DeploymentUploads = up
	doc.Kube, doc.KubeImage, doc.KubeBuild = false, "", nil
	switch {
	case kubeCompute != "":
		return s.resolveKubeDeployment(ctx, d, env, kubeCompute, local, doc)
	case local:
		doc.Compute, doc.Local = "local", true
	case d.InstanceType == "":
		return apperr.Invalid("instance_type: is required: the size of the nodes its replicas run on (see `ferry size list`); or pass --local to run one replica on this machine")
	default:
		name, err := s.core.JobCompute(ctx, &spec.Job{Resources: &spec.Resources{InstanceType: d.InstanceType}})
		if err != nil {
			return &apperr.Error{Code: apperr.CodeInvalid, Msg: strings.Replace(err.Error(), "resources.instance_type", "instance_type", 1), Err: err}
		}
		doc.Compute = name
	}
	return nil
}

// CreateOnlineDeployment stores a deployment in state Creating; the
// controller starts its replicas and moves it to Succeeded once they are
// ready, or Failed with the reason. local runs one replica on this
// machine's local target instead of pool nodes of its instance_type.
func (s *Service) CreateOnlineDeployment(ctx context.Context, who auth.Principal, d *spec.OnlineDeployment, up apitypes.DeploymentUploads, local bool) (*apitypes.OnlineDeployment, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot create deployments")
	}
	if d == nil {
		return nil, apperr.Invalid("the deployment is missing")
	}
	if err := d.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	d.ApplyDefaults()
	if local {
		if d.InstanceCount > 1 || d.ScaleSettings.Type != "default" {
			return nil, apperr.Invalid("instance_count: a --local deployment runs one replica on this machine; leave instance_count and scale_settings out")
		}
	}
	doc := &deploymentDoc{Spec: d, ID: newDeploymentID(), Generation: 1}
	if err := s.resolveDeployment(ctx, d, up, local, nil, doc); err != nil {
		return nil, err
	}
	now := s.now()
	rec := store.Deployment{Endpoint: d.EndpointName, Name: d.Name, State: apitypes.DeploymentCreating, Created: now, Updated: now}
	if err := encodeDeployment(&rec, doc, &replicaSet{Next: 1}); err != nil {
		return nil, err
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	if err := s.st.CreateDeployment(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("endpoint %s has a deployment %s; change it with ferry online-deployment update, or pick another name", d.EndpointName, d.Name)
		}
		return nil, apperr.NoSpace(err, "deployment "+d.Name)
	}
	s.log.Info("deployment created", "endpoint", d.EndpointName, "deployment", d.Name, "compute", doc.Compute, "instance_count", d.InstanceCount)
	s.kickDeployments()
	return s.deploymentView(rec)
}

// UpdateOnlineDeployment changes a deployment. A change of instance_count
// or scale_settings alone scales it; any other change is a rolling update:
// replicas of the new spec start beside the old ones, and the old ones
// drain (take no new requests, finish theirs, stop) only once every new
// one is ready, so no request fails. A deployment that is not Succeeded
// or Failed cannot be changed until it is.
func (s *Service) UpdateOnlineDeployment(ctx context.Context, who auth.Principal, d *spec.OnlineDeployment, ch DeploymentChange) (*apitypes.OnlineDeployment, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot change deployments")
	}
	if d == nil {
		return nil, apperr.Invalid("the deployment is missing")
	}
	if err := d.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	d.ApplyDefaults()
	s.epMu.Lock()
	defer s.epMu.Unlock()
	rec, err := s.getDeploymentRecord(ctx, d.EndpointName, d.Name)
	if err != nil {
		return nil, err
	}
	doc, set, err := decodeDeployment(rec)
	if err != nil {
		return nil, err
	}
	switch rec.State {
	case apitypes.DeploymentSucceeded, apitypes.DeploymentFailed:
	default:
		return nil, apperr.Conflict("deployment %s is %s; wait until it is Succeeded or Failed (ferry online-deployment show), then update it", d.Name, rec.State)
	}
	if doc.Local && (d.InstanceCount > 1 || d.ScaleSettings.Type != "default") {
		return nil, apperr.Invalid("instance_count: a --local deployment runs one replica on this machine; leave instance_count and scale_settings out")
	}
	next := &deploymentDoc{Spec: d, ID: doc.ID, Generation: doc.Generation}
	if err := s.resolveDeployment(ctx, d, ch.Uploads, doc.Local, doc, next); err != nil {
		return nil, err
	}
	if rollingChange(doc, next) || rec.State == apitypes.DeploymentFailed {
		next.Generation++
		set.Failures = 0
	}
	if !sameScale(doc.Spec, d) {
		set.Target = nil
	}
	rec.State, rec.Reason, rec.Updated = apitypes.DeploymentUpdating, "", s.now()
	if err := encodeDeployment(&rec, next, set); err != nil {
		return nil, err
	}
	if err := s.writeDeployment(ctx, rec); err != nil {
		return nil, err
	}
	s.log.Info("deployment updated", "endpoint", d.EndpointName, "deployment", d.Name, "generation", next.Generation)
	s.kickDeployments()
	return s.deploymentView(rec)
}

// rollingChange says whether next changes what a replica runs (a new
// generation), rather than only how many run.
func rollingChange(old, next *deploymentDoc) bool {
	strip := func(doc *deploymentDoc) string {
		d := *doc.Spec
		d.InstanceCount, d.ScaleSettings, d.Description, d.Tags = 0, nil, "", nil
		c := *doc
		c.Spec = &d
		c.Generation = 0
		b, _ := json.Marshal(c)
		return string(b)
	}
	return strip(old) != strip(next)
}

func sameScale(a, b *spec.OnlineDeployment) bool {
	x, _ := json.Marshal(a.ScaleSettings)
	y, _ := json.Marshal(b.ScaleSettings)
	return a.InstanceCount == b.InstanceCount && string(x) == string(y)
}

func (s *Service) writeDeployment(ctx context.Context, rec store.Deployment) error {
	if err := s.st.UpdateDeployment(ctx, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return apperr.NotFound("deployment %s/%s was deleted meanwhile", rec.Endpoint, rec.Name)
		}
		return apperr.NoSpace(err, "deployment "+rec.Name)
	}
	return nil
}

func (s *Service) getDeploymentRecord(ctx context.Context, endpoint, name string) (store.Deployment, error) {
	rec, err := s.st.GetDeployment(ctx, endpoint, name)
	if errors.Is(err, store.ErrNotFound) {
		if _, eerr := s.getEndpointRecord(ctx, endpoint); eerr != nil {
			return rec, eerr
		}
		return rec, apperr.NotFound("endpoint %s has no deployment %s; ferry online-deployment list --endpoint-name %s shows those it has", endpoint, name, endpoint)
	}
	return rec, err
}

// GetOnlineDeployment shows a deployment.
func (s *Service) GetOnlineDeployment(ctx context.Context, endpoint, name string) (*apitypes.OnlineDeployment, error) {
	rec, err := s.getDeploymentRecord(ctx, endpoint, name)
	if err != nil {
		return nil, err
	}
	return s.deploymentView(rec)
}

// ListOnlineDeployments lists an endpoint's deployments by name.
func (s *Service) ListOnlineDeployments(ctx context.Context, endpoint string) ([]*apitypes.OnlineDeployment, error) {
	if _, err := s.getEndpointRecord(ctx, endpoint); err != nil {
		return nil, err
	}
	recs, err := s.st.ListDeployments(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.OnlineDeployment{}
	for _, rec := range recs {
		v, err := s.deploymentView(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DeleteOnlineDeployment moves a deployment to Deleting: the controller
// stops its replicas and then removes it. A deployment that takes live
// traffic is refused, as Azure refuses it: move its traffic first.
func (s *Service) DeleteOnlineDeployment(ctx context.Context, who auth.Principal, endpoint, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete deployments")
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	rec, err := s.getDeploymentRecord(ctx, endpoint, name)
	if err != nil {
		return err
	}
	erec, err := s.getEndpointRecord(ctx, endpoint)
	if err != nil {
		return err
	}
	e, err := endpointSpecOf(erec)
	if err != nil {
		return err
	}
	if p := e.Traffic[name]; p > 0 {
		return apperr.Conflict("deployment %s takes %d%% of endpoint %s's traffic; move it first (ferry online-endpoint update --name %s --traffic \"%s\"), then delete the deployment", name, p, endpoint, endpoint, spec.FormatTraffic(withoutKey(e.Traffic, name)))
	}
	if rec.State == apitypes.DeploymentDeleting {
		return nil
	}
	// The endpoint forgets the deployment: its mirror and a traffic
	// entry of 0 go, in one write.
	_, mirrored := e.MirrorTraffic[name]
	_, listed := e.Traffic[name] // at 0: more was refused above
	if mirrored || listed {
		e.MirrorTraffic, e.Traffic = withoutKey(e.MirrorTraffic, name), withoutKey(e.Traffic, name)
		if erec.Spec, err = json.Marshal(e); err != nil {
			return err
		}
		erec.Updated = s.now()
		if err := s.writeEndpoint(ctx, erec); err != nil {
			return err
		}
	}
	rec.State, rec.Updated = apitypes.DeploymentDeleting, s.now()
	if err := s.writeDeployment(ctx, rec); err != nil {
		return err
	}
	s.log.Info("deployment deleting", "endpoint", endpoint, "deployment", name)
	s.kickDeployments()
	return nil
}

func withoutKey(m map[string]int, k string) map[string]int {
	out := maps.Clone(m)
	delete(out, k)
	if out == nil {
		out = map[string]int{}
	}
	return out
}

// DeploymentLogs writes the last lines of each of a deployment's replicas'
// logs (every line when lines is 0), each under a header naming the
// replica's job; `ferry job logs JOB` follows one.
func (s *Service) DeploymentLogs(ctx context.Context, endpoint, name string, lines int, w io.Writer) error {
	rec, err := s.getDeploymentRecord(ctx, endpoint, name)
	if err != nil {
		return err
	}
	_, set, err := decodeDeployment(rec)
	if err != nil {
		return err
	}
	jobs := s.deployCtl.endedJobs(endpoint, name)
	for _, r := range set.Replicas {
		jobs = append(jobs, r.Job)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(w, "deployment %s has no replica yet\n", name)
		return nil
	}
	for _, job := range jobs {
		jrec, err := s.st.GetJob(ctx, job)
		if err != nil || jrec.Attempt == 0 {
			continue
		}
		fmt.Fprintf(w, "==> replica %s (%s) <==\n", job, jrec.Status)
		text := s.logTail(job, jrec.Attempt, 1<<20)
		if lines > 0 {
			text = lastLines(text, lines)
		}
		io.WriteString(w, text)
		if text != "" && !strings.HasSuffix(text, "\n") {
			io.WriteString(w, "\n")
		}
	}
	return nil
}

// logTail reads up to max bytes of the end of an attempt's log.
func (s *Service) logTail(job string, attempt int, max int64) string {
	size := s.core.AttemptLogSize(job, attempt, 0)
	var b strings.Builder
	_, _ = s.core.ReadAttemptLog(job, attempt, 0, size-min(size, max), max, &b)
	return b.String()
}

func lastLines(text string, n int) string {
	text = strings.TrimSuffix(text, "\n")
	parts := strings.Split(text, "\n")
	if len(parts) > n {
		parts = parts[len(parts)-n:]
	}
	return strings.Join(parts, "\n") + "\n"
}

func (s *Service) deploymentView(rec store.Deployment) (*apitypes.OnlineDeployment, error) {
	doc, set, err := decodeDeployment(rec)
	if err != nil {
		return nil, err
	}
	v := &apitypes.OnlineDeployment{
		OnlineDeployment: doc.Spec, ModelID: doc.ModelID, Compute: doc.Compute, Local: doc.Local,
		ProvisioningState: rec.State, Reason: rec.Reason, Replicas: []apitypes.DeploymentReplica{},
		Created: rec.Created, Updated: rec.Updated,
	}
	for _, r := range set.Replicas {
		v.Replicas = append(v.Replicas, s.deployCtl.replicaView(context.Background(), s, r))
	}
	if doc.Kube {
		v.Replicas = s.deployCtl.kubeReplicaViews(rec.Endpoint + "/" + rec.Name)
	}
	if s.cfg.Router != nil {
		if l, ok := s.cfg.Router.Load(rec.Endpoint)[rec.Name]; ok {
			v.Stats = statsOf(l)
		}
	}
	return v, nil
}

// checkTrafficTargets refuses a split that names a deployment the
// endpoint does not have, or one being deleted.
func (s *Service) checkTrafficTargets(ctx context.Context, e *spec.OnlineEndpoint) error {
	recs, err := s.st.ListDeployments(ctx, e.Name)
	if err != nil {
		return err
	}
	have := map[string]string{}
	for _, r := range recs {
		have[r.Name] = r.State
	}
	for _, field := range []struct {
		name string
		t    map[string]int
	}{{"traffic", e.Traffic}, {"mirror_traffic", e.MirrorTraffic}} {
		for _, d := range slices.Sorted(maps.Keys(field.t)) {
			state, ok := have[d]
			switch {
			case !ok && len(have) == 0:
				return apperr.Invalid("%s.%s: endpoint %s has no deployment %s (it has none yet); deployments come first (ferry online-deployment create), then the traffic that goes to them", field.name, d, e.Name, d)
			case !ok:
				return apperr.Invalid("%s.%s: endpoint %s has no deployment %s; it has %s", field.name, d, e.Name, d, strings.Join(slices.Sorted(maps.Keys(have)), ", "))
			case state == apitypes.DeploymentDeleting && field.t[d] > 0:
				return apperr.Invalid("%s.%s: deployment %s is being deleted", field.name, d, d)
			}
		}
	}
	return nil
}
