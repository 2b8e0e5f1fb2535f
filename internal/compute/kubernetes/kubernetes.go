// Package kubernetes is the `kubernetes` compute target: an existing
// Kubernetes cluster runs each job attempt as one Indexed Job (docs/architecture.md,
// "How a job runs"). Ferry places nothing itself; the cluster's scheduler does,
// and each pod starts the ordinary `ferry runner`, so logs, outputs,
// metrics and environments go through the runner as on every other
// target.
//
// An attempt is three objects in the compute's namespace, all named
// after the attempt (objectName) and labelled with its compute, job and
// attempt: a Secret holding the attempt's run token (never on a command
// line or in the pod spec), a headless Service through which the ranks
// find each other (MASTER_ADDR is rank 0's DNS name, NAME-0.NAME), and
// a batch/v1 Job in completionMode Indexed with one pod per node of the
// job (resources.instance_count), backoffLimit 0, activeDeadlineSeconds
// from limits.timeout and ttlSecondsAfterFinished as a backstop. The
// Job's name is the attempt's durable handle.
//
// The target follows its objects with informers (internal/kube's, one
// for Jobs and one for pods, filtered by the compute's label, in the
// namespace), never by polling: Inspect answers from their caches, and a
// Job that ended, or a pod that cannot start (its image cannot be
// pulled), is settled as soon as the informer sees it: its end is
// remembered and its objects are deleted, so nothing of an attempt is
// left in the namespace.
//
// How images reach the pods (images.go): an image environment, or the
// compute's image, is pulled by the nodes as it is named; an environment
// Ferry builds (a Dockerfile, a conda file on an image) is built on the
// server's Docker engine and pushed to the compute's registry, and its
// pods run it by digest. The runner's binary: with a registry, an init
// container of the runner's own image (Ferry's static binary) copies it
// into an emptyDir mounted at /opt/ferry/bin; without one, the server's
// own executable is mounted from the node (a hostPath volume, read-only),
// so every node needs Ferry's binary at the path the server runs it from
// (a shared or image-baked path, as for Slurm).
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Type is the compute type of this target.
const Type = "kubernetes"

// EnvImageIsEnvironment is the pod's variable saying that the pod runs in
// its job's environment image already, so the runner runs the job in
// place instead of in a container of that image.
const EnvImageIsEnvironment = invocation.EnvImageIsEnvironment

// DefaultCapacity is how many attempts a Kubernetes target hands to the
// cluster at once unless the compute's capacity says otherwise; the rest
// wait in Ferry's queue, with its priorities.
const DefaultCapacity = 100

// Config sets up a Kubernetes target.
type Config struct {
	// Compute is the validated kubernetes compute, with its kubeconfig
	// already opened.
	Compute *spec.Compute
	// Exe is the ferry binary on the nodes, mounted into every pod.
	Exe string
	// CancelGrace is passed to runners: SIGTERM to SIGKILL. 0 = the runner's default.
	CancelGrace time.Duration
	// Snapshot extracts a stored snapshot (an environment's files) into
	// the folder dest, for the images the server builds for a compute
	// with a registry.
	Snapshot func(ctx context.Context, id, dest string) error
	// WorkDir is where those builds keep their files meanwhile; "" is
	// the system's temporary folder.
	WorkDir string
	// Images, when set, is the pusher to the compute's registry (and
	// login) that the server shares with the compute's other users of it
	// (online deployments), so that each image is built once; nil makes
	// one of the target's own from Snapshot and WorkDir.
	Images *envimage.Pusher
	Log    *slog.Logger
}

// Target is the Kubernetes compute target.
type Target struct {
	cfg Config
	c   *spec.Compute
	cl  *Cluster
	log *slog.Logger

	w *watcher
	// images is nil when the compute has no registry.
	images *envimage.Pusher

	runnerOnce sync.Once
	runnerTag  string // the server binary's SHA-256
	runnerErr  error
}

var (
	_ compute.Target       = (*Target)(nil)
	_ compute.Canceller    = (*Target)(nil)
	_ compute.Checker      = (*Target)(nil)
	_ compute.Inspector    = (*Target)(nil)
	_ compute.SelfQueueing = (*Target)(nil)
	_ compute.Finder       = (*Target)(nil)
)

// New returns a Kubernetes target. It makes no request: Check does, and
// the first Launch, Inspect or Cancel starts the informers.
func New(cfg Config) (*Target, error) {
	c := cfg.Compute
	if c == nil || c.Type != Type {
		return nil, errors.New("kubernetes: the compute must be of type kubernetes")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if cfg.Exe == "" {
		return nil, errors.New("kubernetes: Config.Exe (the ferry binary) is required")
	}
	cl, err := Connect(c)
	if err != nil {
		return nil, err
	}
	log := cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	t := &Target{cfg: cfg, c: c, cl: cl, log: log}
	if c.Registry != "" && cfg.Images != nil {
		t.images = cfg.Images
	} else if c.Registry != "" {
		user, password := c.RegistryLogin()
		reg, err := imagereg.New(c.Registry, user, password)
		if err != nil {
			return nil, &CheckError{Field: "registry", Msg: err.Error()}
		}
		if t.images, err = envimage.New(envimage.Config{Registry: reg, Snapshot: cfg.Snapshot, WorkDir: cfg.WorkDir, Log: log}); err != nil {
			return nil, err
		}
	}
	t.w = newWatcher(cl, c.Name, log)
	return t, nil
}

// Close stops the target's informers.
func (t *Target) Close() error {
	t.w.stop()
	return nil
}

// Type implements compute.Target.
func (t *Target) Type() string { return Type }

// Capacity implements compute.Target: the compute's capacity, or
// DefaultCapacity.
func (t *Target) Capacity() int {
	if t.c.Capacity > 0 {
		return t.c.Capacity
	}
	return DefaultCapacity
}

// QueuesItself implements compute.SelfQueueing: the cluster's scheduler
// keeps pods Pending until they fit.
func (t *Target) QueuesItself() bool { return true }

// Admit implements compute.Target: any job whose image is known (its
// environment's image, the compute's image, or, when the compute has a
// registry, the image Ferry builds for its environment), on an instance
// type the compute has; not interactive services.
func (t *Target) Admit(j *spec.Job, env *environment.Spec) error {
	refuse := func(field, why string) error {
		return fmt.Errorf("%s: %s (%w)", field, why, compute.ErrNotSupported)
	}
	if needsBuild(env) && t.images == nil {
		field, what := "environment", "built from a Dockerfile"
		if env.Kind == environment.KindImage {
			field, what = "environment.conda_file", "with a conda file on its image"
		}
		return refuse(field, fmt.Sprintf("an environment %s is built by Ferry, and compute %s has no registry to push it to for the cluster; set the compute's registry: HOST[:PORT][/PREFIX] (a registry its nodes pull from), or build and push the image yourself and give it as the environment's image", what, t.c.Name))
	}
	if !needsBuild(env) {
		if _, err := t.image(env); err != nil {
			return refuse("environment", err.Error())
		}
	}
	if r := j.Resources; r != nil {
		if r.DockerArgs != "" || r.ShmSize != "" {
			return refuse("resources", "docker_args and shm_size do not apply to pods; give the pod's settings in the compute's pod_template")
		}
		if types := t.c.AllInstanceTypes(); r.InstanceType != "" && len(types) > 0 {
			if _, ok := types[r.InstanceType]; !ok {
				return refuse("resources.instance_type", fmt.Sprintf("compute %s has no instance type %q; it has %s", t.c.Name, r.InstanceType, orNone(sortedKeys(types))))
			}
		}
	}
	if len(j.Services) > 0 {
		return refuse("services", "interactive services need a compute instance or cluster")
	}
	return nil
}

// image is the image of a job with environment env.
func (t *Target) image(env *environment.Spec) (string, error) {
	if env != nil && env.Kind == environment.KindImage {
		return env.Image, nil
	}
	if t.c.Image == "" {
		return "", fmt.Errorf("compute %s has no default image for jobs without an image environment; give the job an environment with an image, or the compute an image", t.c.Name)
	}
	return t.c.Image, nil
}

// instanceType is the instance type a job runs on: resources.instance_type,
// the compute's default_instance_type, or none (the pod asks for
// nothing). The file's instance types win over the cluster's
// InstanceType resources of the same name (Cluster.InstanceTypes).
func (t *Target) instanceType(ctx context.Context, j *spec.Job) (*spec.KubeInstanceType, error) {
	name := t.c.DefaultInstanceType
	if r := j.Resources; r != nil && r.InstanceType != "" {
		name = r.InstanceType
	}
	if name == "" {
		return nil, nil
	}
	types, _, err := t.cl.InstanceTypes(ctx, t.c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: reading instance types: %w", err)
	}
	it, ok := types[name]
	if !ok {
		return nil, fmt.Errorf("resources.instance_type: compute %s has no instance type %q; it has %s (%w)", t.c.Name, name, orNone(sortedKeys(types)), compute.ErrNotSupported)
	}
	return &it, nil
}

// Launch implements compute.Target: the attempt's Secret and Service,
// then its Job, which then owns them (so the cluster's garbage collector
// removes them with it). The handle is the Job's name.
func (t *Target) Launch(ctx context.Context, l compute.Launch) (compute.Handle, error) {
	if l.Spec == nil {
		return "", errors.New("kubernetes: the launch carries no job spec")
	}
	if err := t.w.start(ctx); err != nil {
		return "", err
	}
	it, err := t.instanceType(ctx, l.Spec)
	if err != nil {
		return "", err
	}
	var img podImages
	if env := l.Environment; needsBuild(env) {
		if t.images == nil {
			return "", fmt.Errorf("environment: compute %s has no registry for the image Ferry builds (%w)", t.c.Name, compute.ErrNotSupported)
		}
		if img.job, err = t.envImage(ctx, env); err != nil {
			return "", err
		}
		img.inPlace = environment.ImageTag(env.Hash())
	} else {
		if img.job, err = t.image(env); err != nil {
			return "", err
		}
		if env != nil && env.Kind == environment.KindImage {
			img.inPlace = img.job
		}
	}
	if t.images != nil {
		if img.runner, err = t.runnerImage(ctx); err != nil {
			return "", err
		}
	}
	objs, err := t.objects(l, img, it)
	if err != nil {
		return "", err
	}
	ns := t.cl.Namespace
	name := objs.job.Name
	core := t.cl.Client.CoreV1()
	undo := func() {
		ctx := context.WithoutCancel(ctx)
		_ = core.Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = core.Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	// A Secret or Service of the same name is what a launch of this very
	// attempt left when its server died before its Job was made: replaced.
	if err := createOrReplace(ctx, func() error {
		_, err := core.Secrets(ns).Create(ctx, objs.secret, metav1.CreateOptions{})
		return err
	}, func() error { return core.Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}) }); err != nil {
		return "", fmt.Errorf("kubernetes: create secret %s: %s", name, apiProblem(err))
	}
	if err := createOrReplace(ctx, func() error {
		_, err := core.Services(ns).Create(ctx, objs.service, metav1.CreateOptions{})
		return err
	}, func() error { return core.Services(ns).Delete(ctx, name, metav1.DeleteOptions{}) }); err != nil {
		undo()
		return "", fmt.Errorf("kubernetes: create service %s: %s", name, apiProblem(err))
	}
	job, err := t.cl.Client.BatchV1().Jobs(ns).Create(ctx, objs.job, metav1.CreateOptions{})
	if err != nil {
		undo()
		return "", fmt.Errorf("kubernetes: create job %s: %s", name, apiProblem(err))
	}
	// Owned by the Job, the Secret and Service go with it, also when the
	// TTL controller deletes it. Best effort: Ferry deletes them itself.
	owner := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}}
	if err := t.own(ctx, name, owner); err != nil {
		t.log.Warn("kubernetes: could not make the job own its secret and service", "job", l.Job, "handle", name, "err", err)
	}
	t.log.Debug("kubernetes job created", "job", l.Job, "attempt", l.Attempt, "handle", name)
	return compute.Handle(name), nil
}

// createOrReplace runs create, and when the object exists, del and create
// again.
func createOrReplace(ctx context.Context, create, del func() error) error {
	err := create()
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := del(); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for range 20 {
		if err = create(); !apierrors.IsAlreadyExists(err) {
			return err
		}
		select { // the old one is still being deleted
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// own sets the owner of the attempt's Secret and Service.
func (t *Target) own(ctx context.Context, name string, owner []metav1.OwnerReference) error {
	core := t.cl.Client.CoreV1()
	ns := t.cl.Namespace
	s, err := core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.OwnerReferences = owner
	if _, err := core.Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return err
	}
	svc, err := core.Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	svc.OwnerReferences = owner
	_, err = core.Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
	return err
}

// Cancel implements compute.Canceller: the attempt's Job is deleted with
// foreground propagation (its pods go first), then its Service and
// Secret. A handle the cluster no longer has is not an error.
func (t *Target) Cancel(ctx context.Context, h compute.Handle) error {
	if err := t.w.start(ctx); err != nil {
		return err
	}
	t.w.remember(string(h), compute.EngineState{Phase: compute.PhaseEnded, Outcome: "Canceled", Reason: "canceled: Job deleted"})
	return t.w.deleteAttempt(ctx, string(h))
}

// Inspect implements compute.Inspector from the informers' caches.
func (t *Target) Inspect(ctx context.Context, hs []compute.Handle) (map[compute.Handle]compute.EngineState, error) {
	if err := t.w.start(ctx); err != nil {
		return nil, err
	}
	res := map[compute.Handle]compute.EngineState{}
	for _, h := range hs {
		if st, ok := t.w.state(string(h)); ok {
			res[h] = st
		}
	}
	return res, nil
}

// FindHandles implements compute.Finder: the Jobs of the attempts, by
// their labels and annotation, as a launch under way when the server
// stopped left them.
func (t *Target) FindHandles(ctx context.Context, as []compute.Attempt) (map[compute.Attempt]compute.Handle, error) {
	if err := t.w.start(ctx); err != nil {
		return nil, err
	}
	return t.w.find(as), nil
}

func sortedKeys(m map[string]spec.KubeInstanceType) []string {
	return slices.Sorted(maps.Keys(m))
}
