package online

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Core is what the online endpoints need of the job core: the Service
// is one. Beyond Jobs, a deployment's replicas are submitted jobs whose
// code, model and environment are snapshots the server reads, and whose
// logs the controller reads for their address and failures.
type Core interface {
	workspace.Jobs
	// SubmitJob submits a replica's job, as a user's is submitted.
	SubmitJob(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error)
	// APIURL is the server's URL: scoring URIs are under it.
	APIURL() string
	// ResolveModel finds the registered model a reference names.
	ResolveModel(ctx context.Context, ref string) (*apitypes.Model, error)
	ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error)
	RequireSnapshot(id, field string) error
	ReadSnapshot(id string) (*snapshot.Manifest, error)
	OpenStoredBlob(digest string) (*blob.Reader, error)
	HasBlob(digest string) bool
	StoreSnapshot(m *snapshot.Manifest, files map[string]string, what string) (string, error)
	ReadAttemptLog(job string, attempt, rank int, offset, max int64, w io.Writer) (int64, error)
	AttemptLogSize(job string, attempt, rank int) int64
}

var _ Core = (*workspace.Service)(nil)

// Store is the part of the workspace's store the online endpoints read
// and write: the endpoints and their deployments, their replicas' jobs,
// and the Kubernetes computes their deployments run on.
type Store interface {
	store.Endpoints
	store.Jobs
	store.Computes
}

// Config is what the server gives the online endpoints.
type Config struct {
	// Secrets is the workspace key: it seals the endpoints' keys, signs
	// their tokens and derives their replicas' secrets; nil means
	// endpoints cannot be made.
	Secrets *secrets.Key
	// Router routes scoring requests to online endpoints (the gateway);
	// nil routes nothing.
	Router EndpointRouter
	// ProbeReplica asks a deployment's replica at baseURL whether it is
	// live and ready (GET / answers 200): nil when it is. secret is the
	// replica's (the probe sends it, as the gateway does; the replica
	// answers nothing without it). The server gives the HTTP one; nil
	// takes a replica as ready once it listens.
	ProbeReplica func(ctx context.Context, baseURL string, secret secrets.Secret) error
	// KubeReplicas runs the deployments of endpoints on a Kubernetes
	// compute (kubedeploy.go); nil refuses such deployments.
	KubeReplicas KubeReplicas
	Log          *slog.Logger
}

// Service is the online endpoints of a workspace: their API (endpoints.go,
// deployments.go) and the deployment controller (deployctl.go), one
// controller of the core's, registered with Register. It is safe for
// concurrent use.
type Service struct {
	core Core
	st   Store
	cfg  Config
	log  *slog.Logger

	wake      chan struct{} // wakes the deployment controller
	deployCtl *deployCtl

	// epMu orders the writes of endpoints, so the router hears of them
	// in the order the store has them (endpoints.go).
	epMu sync.Mutex
	// isSnap is the snapshot of Ferry's inference server that replica
	// jobs take as an input, made once (inferenceServerSnapshot).
	isMu   sync.Mutex
	isSnap string
}

var (
	_ workspace.Controller          = (*Service)(nil)
	_ workspace.JobWatcher          = (*Service)(nil)
	_ workspace.LogWatcher          = (*Service)(nil)
	_ workspace.AssignmentDecorator = (*Service)(nil)
)

// New makes the online endpoints of a workspace and routes the stored
// endpoints, as a starting server does. An endpoint whose keys do not
// open is logged and left unrouted; a store that cannot list them fails.
func New(ctx context.Context, core Core, st Store, cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{core: core, st: st, cfg: cfg, log: cfg.Log, wake: make(chan struct{}, 1), deployCtl: newDeployCtl(core.Now())}
	if err := s.routeEndpoints(ctx); err != nil {
		return nil, fmt.Errorf("route endpoints: %w", err)
	}
	return s, nil
}

// Registry is where the server registers a workload: the workspace.
type Registry interface {
	RegisterController(c workspace.Controller)
}

// Register makes the deployment controller one of r's loops.
func Register(r Registry, s *Service) { r.RegisterController(s) }

// Name implements workspace.Controller.
func (s *Service) Name() string { return "deployments" }

// Interval implements workspace.Controller.
func (s *Service) Interval() time.Duration { return deployTick }

// Wake implements workspace.Controller.
func (s *Service) Wake() <-chan struct{} { return s.wake }

// Reconcile implements workspace.Controller.
func (s *Service) Reconcile(ctx context.Context) error { return s.reconcileDeployments(ctx) }

// JobChanged implements workspace.JobWatcher: the change of a replica's
// job wakes the controller.
func (s *Service) JobChanged(job string) {
	if s.deployCtl.isReplica(job) {
		s.kickDeployments()
	}
}

// JobLogged implements workspace.LogWatcher: the controller reads a
// replica's log only until it finds its status line, so a chunk wakes
// it only until then.
func (s *Service) JobLogged(job string, attempt int) {
	if s.deployCtl.readsLog(job, attempt) {
		s.kickDeployments()
	}
}

// DecorateAssignment implements workspace.AssignmentDecorator: a
// replica's runner gets the replica's secret.
func (s *Service) DecorateAssignment(job *apitypes.Job, a *apitypes.Assignment) {
	if !isReplicaJob(job.Spec) {
		return
	}
	if secret, ok := s.replicaSecret(a.Job, a.Attempt); ok {
		a.ReplicaSecret = secret.Reveal()
	}
}

func (s *Service) now() time.Time { return s.core.Now() }

func (s *Service) kickDeployments() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
