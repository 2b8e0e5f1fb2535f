package online

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Online deployments on a Kubernetes compute (Azure's
// kubernetesOnlineDeployment): an endpoint whose file names a
// kubernetes compute (`compute: azureml:NAME`) runs its deployments
// there (all but those whose $schema is managedOnlineDeployment, which
// run on pool nodes as on a managed endpoint, so that one endpoint can
// split its traffic between the two), as a Deployment and a Service that the cluster keeps running,
// rolls and replaces (Config.KubeReplicas). The controller's part is
// smaller than for replica jobs: it applies the deployment's generation,
// sets the count its scaler wants, reads the state the cluster reports
// and routes the ready pods an informer tells it of. What it knows
// beyond the store (what it applied, the watch) is in memory: a
// restarted server applies again (the same template changes nothing on
// the cluster) and watches again. An environment Ferry builds (a
// Dockerfile, a conda file on an image) on a compute with a registry is
// built and pushed before the generation is applied, in a goroutine of
// the controller's (KubeImageBuilder: the kubernetes target's code, so a
// job and a deployment of one environment build it once); a restarted
// server asks for it again and finds its tag in the registry.

const (
	// kubeStatusEvery is how often the controller asks the cluster for a
	// deployment's state (three list requests) when nothing kicked it.
	kubeStatusEvery = time.Second
	// kubeRetryAfter is how long a failed request to the cluster waits
	// before the controller tries it again.
	kubeRetryAfter = 5 * time.Second
)

// kubeLive is what the controller holds of one Kubernetes deployment.
// Only the controller's pass touches it, but for urls and stop, which the
// watch sets: those under deployCtl.mu.
type kubeLive struct {
	applied  int // the generation applied; 0 before the first apply by this server
	replicas int // the count last applied or scaled to; -1 before
	stop     func()
	urls     []string // ready pods' base URLs, from the watch
	statusAt time.Time
	retryAt  time.Time
	deleted  bool // Delete was called
	// The image Ferry builds of the deployment's environment (KubeBuild)
	// for generation buildGen: building while KubeImageBuilder.EnvImage
	// runs, in a goroutine of its own, then image or buildErr. Under
	// deployCtl.mu: the build's goroutine sets them.
	buildGen    int
	building    bool
	image       string
	buildErr    error
	cancelBuild func()
}

// kubeEndpointCompute is the name of the kubernetes compute an
// endpoint's file names, or "".
func kubeEndpointCompute(e *spec.OnlineEndpoint) string {
	return strings.TrimPrefix(e.Compute, "azureml:")
}

// deploymentKubeCompute is the kubernetes compute deployment d of
// endpoint e runs on, or "" when it runs on pool nodes (or --local). One
// endpoint may hold both kinds, which Azure does not allow, so that a
// split can move traffic between the two: a managedOnlineDeployment
// runs on pool nodes of its instance_type even when the endpoint names
// a kubernetes compute; any other runs on the endpoint's compute.
func deploymentKubeCompute(e *spec.OnlineEndpoint, d *spec.OnlineDeployment) string {
	if d.SchemaKind() == "managed" {
		return ""
	}
	return kubeEndpointCompute(e)
}

// checkEndpointCompute refuses an endpoint whose compute is not a
// kubernetes compute of this workspace.
func (s *Service) checkEndpointCompute(ctx context.Context, e *spec.OnlineEndpoint) error {
	name := kubeEndpointCompute(e)
	if name == "" {
		return nil
	}
	_, err := s.kubeCompute(ctx, name, "compute")
	return err
}

// kubeCompute reads a kubernetes compute with its secrets open. field
// names what refers to it in messages.
func (s *Service) kubeCompute(ctx context.Context, name, field string) (*spec.Compute, error) {
	rec, err := s.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.Invalid("%s: compute %s does not exist; attach a kubernetes compute (ferry compute attach -f FILE with type: kubernetes), or leave compute out for a managed endpoint", field, name)
	}
	if err != nil {
		return nil, err
	}
	if rec.Type != "kubernetes" {
		return nil, apperr.Invalid("%s: compute %s is of type %s; an endpoint's compute must be a kubernetes compute (leave compute out for a managed endpoint, whose deployments run on nodes of their instance_type)", field, name, rec.Type)
	}
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("compute %s: stored spec: %w", name, err)
	}
	if s.cfg.Secrets == nil {
		return nil, apperr.Invalid("%s: compute %s: this server has no key to open its kubeconfig with", field, name)
	}
	return workspace.OpenCompute(s.cfg.Secrets, &c)
}

// resolveKubeDeployment fills doc for a deployment of an endpoint on
// kubernetes compute computeName, refusing what cannot run there.
func (s *Service) resolveKubeDeployment(ctx context.Context, d *spec.OnlineDeployment, env *environment.Spec, computeName string, local bool, doc *deploymentDoc) error {
	if local {
		return apperr.Invalid("--local: endpoint %s runs its deployments on kubernetes compute %s; leave --local out, or give the deployment the managedOnlineDeployment $schema to run it beside them on this machine", d.EndpointName, computeName)
	}
	if s.cfg.KubeReplicas == nil {
		return apperr.Invalid("compute: endpoint %s runs on kubernetes compute %s, and this server runs no Kubernetes deployments", d.EndpointName, computeName)
	}
	c, err := s.kubeCompute(ctx, computeName, "compute")
	if err != nil {
		return err
	}
	if _, err := kubeInstanceType(c, d.InstanceType); err != nil {
		return err
	}
	switch {
	case env != nil && env.Kind == environment.KindImage && env.CondaFile == "":
		doc.KubeImage = env.Image
	case (env == nil || env.Kind == environment.KindUserManaged) && c.Image != "":
		doc.KubeImage = c.Image
	case environment.NeedsImageBuild(env):
		field, what := "environment", "built from a Dockerfile"
		if env.Kind == environment.KindImage {
			field, what = "environment.conda_file", "with a conda file on its image"
		}
		if c.Registry == "" {
			return apperr.Invalid("%s: an environment %s is built by Ferry, and compute %s has no registry to push it to for the cluster; set the compute's registry: HOST[:PORT][/PREFIX] (a registry its nodes pull from, with registry_credentials when it needs a login), or build and push the image yourself and give it as the environment's image", field, what, computeName)
		}
		if _, ok := s.cfg.KubeReplicas.(KubeImageBuilder); !ok {
			return apperr.Invalid("%s: an environment %s is built by Ferry, and this server cannot build images for deployments on kubernetes compute %s; give an environment with image: instead", field, what, computeName)
		}
		doc.KubeBuild = env
	default:
		return apperr.Invalid("environment: a deployment on kubernetes compute %s runs in an image: give an environment with image: (python3 and what the scoring script imports) and no conda_file, or one Ferry builds (build: with a Dockerfile, or image: with a conda_file) when the compute has a registry:, or leave environment out to run in the compute's image%s", computeName, map[bool]string{true: "", false: " (compute " + computeName + " names none)"}[c.Image != ""])
	}
	doc.Compute, doc.Kube = computeName, true
	return nil
}

// kubeInstanceType is the compute's instance type name ("" for its
// default), naming those it has when it has none by that name.
func kubeInstanceType(c *spec.Compute, name string) (KubeInstanceType, error) {
	if name == "" {
		name = c.DefaultInstanceType
	}
	if name == "" {
		return KubeInstanceType{}, nil
	}
	types := c.AllInstanceTypes()
	it, ok := types[name]
	if !ok {
		names := slices.Sorted(maps.Keys(types))
		if len(names) == 0 {
			return KubeInstanceType{}, apperr.Invalid("instance_type: compute %s has no instance types; leave instance_type out, or add instance_types to the compute", c.Name)
		}
		return KubeInstanceType{}, apperr.Invalid("instance_type: compute %s has no instance type %q; it has %s", c.Name, name, strings.Join(names, ", "))
	}
	out := KubeInstanceType{NodeSelector: it.NodeSelector, Requests: it.Resources.Requests, Limits: it.Resources.Limits}
	for _, t := range it.Tolerations {
		out.Tolerations = append(out.Tolerations, KubeToleration{Key: t.Key, Operator: t.Operator, Value: t.Value, Effect: t.Effect})
	}
	return out, nil
}

func kubeTarget(c *spec.Compute) KubeTarget {
	return KubeTarget{Kubeconfig: []byte(c.KubeconfigContent), Namespace: c.Namespace}
}

// reconcileKubeDeployment is reconcileDeployment for a deployment on a
// Kubernetes compute. The caller holds epMu.
func (s *Service) reconcileKubeDeployment(ctx context.Context, rec store.Deployment, doc *deploymentDoc, set *replicaSet, deleting bool) error {
	kr := s.cfg.KubeReplicas
	key := rec.Endpoint + "/" + rec.Name
	c := s.deployCtl
	now := s.now()
	c.mu.Lock()
	kl := c.kube[key]
	if kl == nil {
		kl = &kubeLive{replicas: -1}
		c.kube[key] = kl
	}
	retryAt := kl.retryAt
	c.mu.Unlock()
	if now.Before(retryAt) {
		return nil
	}
	if kr == nil {
		return s.kubeRetry(ctx, kl, rec, doc, set, deleting, errors.New("this server runs no Kubernetes deployments"))
	}
	comp, err := s.kubeCompute(ctx, doc.Compute, "compute")
	if err != nil {
		return s.kubeRetry(ctx, kl, rec, doc, set, deleting, err)
	}
	at := kubeTarget(comp)
	if deleting {
		return s.deleteKubeDeployment(ctx, kl, at, rec)
	}
	if kl.stop == nil {
		stop, err := kr.WatchReady(ctx, at, rec.Endpoint, rec.Name, func(urls []string) {
			c.mu.Lock()
			kl.urls = slices.Sorted(slices.Values(urls))
			c.mu.Unlock()
			s.kickDeployments()
		})
		if err != nil {
			return s.kubeRetry(ctx, kl, rec, doc, set, deleting, fmt.Errorf("watch its pods: %w", err))
		}
		c.mu.Lock()
		kl.stop = stop
		c.mu.Unlock()
	}
	before := string(rec.Replicas) + rec.State + rec.Reason
	want := s.wantReplicas(key, doc, set, rec.Updated, now)
	kicked := false
	switch {
	case kl.applied != doc.Generation:
		image, building, err := s.kubeImage(ctx, kl, rec, doc, comp)
		if err != nil {
			return s.kubeBuildFailed(ctx, rec, doc, set, err)
		}
		if building != "" {
			return s.kubeBuilding(ctx, rec, doc, set, building)
		}
		d, err := s.kubeDeployment(doc, comp, rec, want, image)
		if err == nil {
			err = kr.Apply(ctx, d)
		}
		if err != nil {
			return s.kubeRetry(ctx, kl, rec, doc, set, deleting, err)
		}
		kl.applied, kl.replicas, kicked = doc.Generation, want, true
	case kl.replicas != want:
		if err := kr.Scale(ctx, at, rec.Endpoint, rec.Name, want); err != nil {
			return s.kubeRetry(ctx, kl, rec, doc, set, deleting, err)
		}
		s.log.Info("kubernetes deployment scaled", "endpoint", rec.Endpoint, "deployment", rec.Name, "replicas", want)
		kl.replicas, kicked = want, true
	}
	if kicked || !now.Before(kl.statusAt) {
		st, err := kr.Status(ctx, at, rec.Endpoint, rec.Name)
		if err != nil {
			return s.kubeRetry(ctx, kl, rec, doc, set, deleting, err)
		}
		kl.statusAt = now.Add(kubeStatusEvery)
		if st.Generation == doc.Generation {
			switch st.State {
			case apitypes.DeploymentSucceeded:
				rec.State, rec.Reason = apitypes.DeploymentSucceeded, ""
			case apitypes.DeploymentFailed:
				rec.State, rec.Reason = apitypes.DeploymentFailed, st.Reason
			default:
				// Creating or Updating, as this deployment's own history
				// says (a scale of a Succeeded one is Updating).
				if rec.State != apitypes.DeploymentCreating {
					rec.State = apitypes.DeploymentUpdating
				}
				rec.Reason = st.Reason
			}
		}
	}
	if err := encodeDeployment(&rec, doc, set); err != nil {
		return err
	}
	if string(rec.Replicas)+rec.State+rec.Reason != before {
		if rec.State != apitypes.DeploymentSucceeded || !strings.Contains(before, apitypes.DeploymentSucceeded) {
			s.log.Info("kubernetes deployment", "endpoint", rec.Endpoint, "deployment", rec.Name, "state", rec.State, "reason", firstLine(rec.Reason))
		}
		rec.Updated = now
		return s.st.UpdateDeployment(ctx, rec)
	}
	return nil
}

// kubeImage is the image the pods of the deployment's generation run:
// the one its file names, or the one Ferry builds of its environment.
// The build runs in a goroutine of its own, started by the first call
// for the generation, while the controller goes on with the others:
// until it ends, kubeImage returns what is under way ("building ...");
// then the image, or the build's error for every later call (a failed
// build is not retried for the generation, as a failed job is not; an
// update, or a restarted server, tries again).
func (s *Service) kubeImage(ctx context.Context, kl *kubeLive, rec store.Deployment, doc *deploymentDoc, comp *spec.Compute) (image, building string, err error) {
	if doc.KubeBuild == nil {
		return doc.KubeImage, "", nil
	}
	reg := kubeRegistry(comp)
	if reg == nil {
		return "", "", fmt.Errorf("environment: compute %s has no registry for the image Ferry builds of the deployment's environment; set the compute's registry:, or give the environment's image", comp.Name)
	}
	ib, ok := s.cfg.KubeReplicas.(KubeImageBuilder)
	if !ok {
		return "", "", errors.New("this server cannot build images for deployments on Kubernetes")
	}
	doing := fmt.Sprintf("building the environment's image (%s) on the server and pushing it to registry %s", doc.KubeBuild.Describe(), reg.Address)
	c := s.deployCtl
	c.mu.Lock()
	defer c.mu.Unlock()
	if kl.buildGen == doc.Generation {
		switch {
		case kl.building:
			return "", doing, nil
		case kl.buildErr != nil:
			return "", "", kl.buildErr
		default:
			return kl.image, "", nil
		}
	}
	if kl.cancelBuild != nil {
		kl.cancelBuild()
	}
	bctx, cancel := context.WithCancel(ctx)
	gen, env := doc.Generation, doc.KubeBuild
	kl.buildGen, kl.building, kl.image, kl.buildErr, kl.cancelBuild = gen, true, "", nil, cancel
	s.log.Info("kubernetes deployment: preparing its environment's image", "endpoint", rec.Endpoint, "deployment", rec.Name,
		"environment", env.Describe(), "registry", reg.Address)
	go func() {
		defer cancel()
		ref, err := ib.EnvImage(bctx, *reg, env)
		c.mu.Lock()
		if kl.buildGen == gen {
			kl.building, kl.image, kl.buildErr, kl.cancelBuild = false, ref, err, nil
		}
		c.mu.Unlock()
		s.kickDeployments()
	}()
	return "", doing, nil
}

// kubeRegistry is the compute's registry, nil when it has none.
func kubeRegistry(c *spec.Compute) *KubeRegistry {
	if c.Registry == "" {
		return nil
	}
	r := &KubeRegistry{Address: c.Registry}
	r.Username, r.Password = c.RegistryLogin()
	return r
}

// kubeBuilding says, on a deployment being created or updated, that its
// image is being built.
func (s *Service) kubeBuilding(ctx context.Context, rec store.Deployment, doc *deploymentDoc, set *replicaSet, doing string) error {
	if (rec.State != apitypes.DeploymentCreating && rec.State != apitypes.DeploymentUpdating) || rec.Reason == doing {
		return nil
	}
	rec.Reason = doing
	if err := encodeDeployment(&rec, doc, set); err != nil {
		return err
	}
	rec.Updated = s.now()
	return s.st.UpdateDeployment(ctx, rec)
}

// kubeBuildFailed records a failed build of the deployment's image as
// its reason (Failed, but for a Succeeded one, which keeps serving its
// pods), once.
func (s *Service) kubeBuildFailed(ctx context.Context, rec store.Deployment, doc *deploymentDoc, set *replicaSet, err error) error {
	why := "kubernetes compute " + doc.Compute + ": " + err.Error()
	if rec.Reason == why {
		return nil
	}
	s.log.Warn("kubernetes deployment: its environment's image", "endpoint", rec.Endpoint, "deployment", rec.Name, "err", firstLine(err.Error()))
	return s.kubeFailed(ctx, rec, doc, set, false, why)
}

// kubeRetry records a failed request to the cluster as the deployment's
// reason (Failed while it is being made; a Succeeded one keeps serving
// and says so) and waits kubeRetryAfter before the next try.
func (s *Service) kubeRetry(ctx context.Context, kl *kubeLive, rec store.Deployment, doc *deploymentDoc, set *replicaSet, deleting bool, err error) error {
	c := s.deployCtl
	c.mu.Lock()
	kl.retryAt = s.now().Add(kubeRetryAfter)
	c.mu.Unlock()
	s.log.Warn("kubernetes deployment: request failed", "endpoint", rec.Endpoint, "deployment", rec.Name, "err", err)
	return s.kubeFailed(ctx, rec, doc, set, deleting, "kubernetes compute "+doc.Compute+": "+err.Error())
}

func (s *Service) kubeFailed(ctx context.Context, rec store.Deployment, doc *deploymentDoc, set *replicaSet, deleting bool, why string) error {
	if deleting {
		rec.Reason = "cannot delete yet: " + why
	} else {
		if rec.State != apitypes.DeploymentSucceeded {
			rec.State = apitypes.DeploymentFailed
		}
		rec.Reason = why
	}
	if err := encodeDeployment(&rec, doc, set); err != nil {
		return err
	}
	rec.Updated = s.now()
	return s.st.UpdateDeployment(ctx, rec)
}

// deleteKubeDeployment deletes the deployment's objects and, once none
// is left, its record.
func (s *Service) deleteKubeDeployment(ctx context.Context, kl *kubeLive, at KubeTarget, rec store.Deployment) error {
	kr := s.cfg.KubeReplicas
	key := rec.Endpoint + "/" + rec.Name
	c := s.deployCtl
	c.mu.Lock()
	stop := kl.stop
	kl.stop, kl.urls = nil, nil
	if kl.cancelBuild != nil {
		kl.cancelBuild()
		kl.cancelBuild = nil
	}
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	if !kl.deleted {
		if err := kr.Delete(ctx, at, rec.Endpoint, rec.Name); err != nil {
			kl.retryAt = s.now().Add(kubeRetryAfter)
			return fmt.Errorf("delete its objects: %w", err)
		}
		kl.deleted = true
	}
	left, err := kr.Remaining(ctx, at, rec.Endpoint, rec.Name)
	if err != nil {
		kl.retryAt = s.now().Add(kubeRetryAfter)
		return err
	}
	if len(left) > 0 {
		return nil
	}
	if err := s.st.DeleteDeployment(ctx, rec.Endpoint, rec.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	c.mu.Lock()
	delete(c.kube, key)
	delete(c.scale, key)
	delete(c.demand, key)
	delete(c.routedAny, key)
	c.mu.Unlock()
	s.log.Info("deployment deleted", "endpoint", rec.Endpoint, "deployment", rec.Name)
	return nil
}

// kubeDeployment is what KubeReplicas.Apply gets for the deployment's
// current generation: its file, its code's and model's files, its image
// and where its pods go.
func (s *Service) kubeDeployment(doc *deploymentDoc, comp *spec.Compute, rec store.Deployment, replicas int, image string) (KubeDeployment, error) {
	it, err := kubeInstanceType(comp, doc.Spec.InstanceType)
	if err != nil {
		return KubeDeployment{}, err
	}
	code, err := s.snapshotFiles(doc.CodeSnapshot, "")
	if err != nil {
		return KubeDeployment{}, fmt.Errorf("code_configuration.code: %w", err)
	}
	var model map[string][]byte
	if doc.ModelSnapshot != "" {
		prefix := ""
		if doc.ModelFolder != "" {
			prefix = doc.ModelFolder + "/"
		}
		if model, err = s.snapshotFiles(doc.ModelSnapshot, prefix); err != nil {
			return KubeDeployment{}, fmt.Errorf("model: %w", err)
		}
	}
	secret, ok := s.kubeReplicaSecret(rec, doc)
	if !ok {
		return KubeDeployment{}, errors.New("this server has no workspace key to derive the replicas' secret from")
	}
	return KubeDeployment{Target: kubeTarget(comp), Endpoint: rec.Endpoint, Deployment: rec.Name,
		Generation: doc.Generation, Spec: doc.Spec, Replicas: &replicas, Image: image, Registry: kubeRegistry(comp),
		Code: code, Model: model, InstanceType: it, ReplicaSecret: secret}, nil
}

// kubeReplicaSecret is the secret of the replicas of a deployment on
// Kubernetes: what its pods require of every request, and the gateway
// sends them. One for all the deployment's pods, which share one pod
// template (and so one Secret to read it from), across its generations
// (during a rolling update the gateway routes to old and new pods alike
// by their address alone); a deployment deleted and created again under
// the same name has another, as it is made of the deployment's ID (made
// at create, kept by updates) too. Derived from the workspace key like a
// replica job's (replicaSecret), so a restarted server knows it without
// storing it. False without a workspace key.
func (s *Service) kubeReplicaSecret(rec store.Deployment, doc *deploymentDoc) (secrets.Secret, bool) {
	if s.cfg.Secrets == nil {
		return "", false
	}
	return s.cfg.Secrets.Derive("kube-replicas/" + rec.Endpoint + "/" + rec.Name + "/" + doc.ID), true
}

// snapshotFiles reads a snapshot's files by path (with prefix before
// each). The cluster gets them in a ConfigMap, so they are small.
func (s *Service) snapshotFiles(id, prefix string) (map[string][]byte, error) {
	m, err := s.core.ReadSnapshot(id)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, f := range m.Files {
		r, err := s.core.OpenStoredBlob(f.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		out[prefix+f.Path] = data
	}
	return out, nil
}

// kubeRouted is the ready pods of a Kubernetes deployment, for routing.
func (c *deployCtl) kubeRouted(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kl := c.kube[key]; kl != nil {
		return slices.Clone(kl.urls)
	}
	return nil
}

// kubeReplicaViews shows a Kubernetes deployment's ready pods (which
// have no job: `kubectl get pods -l ferry.ml/deployment=NAME` shows the
// others).
func (c *deployCtl) kubeReplicaViews(key string) []apitypes.DeploymentReplica {
	out := []apitypes.DeploymentReplica{}
	for _, u := range c.kubeRouted(key) {
		out = append(out, apitypes.DeploymentReplica{State: apitypes.ReplicaReady, Address: u})
	}
	return out
}
