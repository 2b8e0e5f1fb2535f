package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/compute/amlcompute"
	"github.com/ferry-ml/ferry/internal/compute/computeinstance"
	"github.com/ferry-ml/ferry/internal/compute/kubernetes"
	"github.com/ferry-ml/ferry/internal/compute/local"
	"github.com/ferry-ml/ferry/internal/compute/slurm"
	"github.com/ferry-ml/ferry/internal/compute/virtualmachine"
	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// targetEnv is what the server hands every compute type's constructor:
// the settings of this server that targets are made with.
type targetEnv struct {
	Local local.Config // the built-in local target's settings, from the server's flags
	Log   *slog.Logger
	// APIURL is the URL this server gives runners (--advertise-url, or
	// http://ADDR): where a target's runners call it.
	APIURL string
	// Exe is the ferry binary runners start from; CancelGrace is the
	// runners' SIGTERM-to-SIGKILL grace (0: the runner's default).
	Exe         string
	CancelGrace time.Duration
	// Key opens the secrets sealed in a stored compute (an SSH key for a
	// login node); the opened copy goes to the target alone.
	Key *secrets.Key
	// Snapshot extracts a stored snapshot into a folder: the files of an
	// environment the server builds an image of (a kubernetes compute
	// with a registry).
	Snapshot func(ctx context.Context, id, dest string) error
	// WorkDir is where such builds keep their files meanwhile.
	WorkDir string
	// Images are the pushers to kubernetes computes' registries, shared
	// with the online deployments on them (kubeReplicas); they build with
	// Snapshot and WorkDir.
	Images *envimage.Pushers
}

// newTarget makes the compute.Target of one stored compute of its type.
type newTarget func(env targetEnv, c *spec.Compute) (compute.Target, error)

// computeTypes and poolTypes are the registry of the compute types this
// server runs, by a compute file's `type:`. Adding a type is one line in
// one of them: a type the workspace hands attempts to through a
// compute.Target is its package's constructor, adapted to newTarget where
// it needs to be, in computeTypes; a type whose computes are pools of
// agent nodes that the workspace's pool loop runs is its package's
// description in poolTypes. A name is in one of them only.
var computeTypes = map[string]newTarget{
	"local":         newLocal,
	"slurm":         newSlurm,
	kubernetes.Type: newKubernetes,
}

var poolTypes = map[string]*compute.Pool{
	amlcompute.Type:      amlcompute.Pool,
	computeinstance.Type: computeinstance.Pool,
	virtualmachine.Type:  virtualmachine.Pool,
}

// PoolType is what sets computes of type typ apart when they are pools of
// agent nodes, and nil when typ is not a pool type: the command line
// shows and reads a compute file as its type says.
func PoolType(typ string) *compute.Pool { return poolTypes[typ] }

func newLocal(env targetEnv, c *spec.Compute) (compute.Target, error) {
	cfg := env.Local
	if c.Capacity > 0 {
		cfg.Capacity = c.Capacity
	}
	return local.New(cfg), nil
}

func newSlurm(env targetEnv, c *spec.Compute) (compute.Target, error) {
	open, err := workspace.OpenCompute(env.Key, c)
	if err != nil {
		return nil, err
	}
	return slurm.New(slurm.Config{Compute: open, Exe: env.Exe, CancelGrace: env.CancelGrace, Log: cmp.Or(env.Log, slog.New(slog.DiscardHandler)).With("compute", c.Name)})
}

func newKubernetes(env targetEnv, c *spec.Compute) (compute.Target, error) {
	open, err := workspace.OpenCompute(env.Key, c)
	if err != nil {
		return nil, err
	}
	var images *envimage.Pusher
	if open.Registry != "" && env.Images != nil {
		user, password := open.RegistryLogin()
		if images, err = env.Images.For(open.Registry, user, password); err != nil {
			return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err} // "registry: ..." already
		}
	}
	t, err := kubernetes.New(kubernetes.Config{Compute: open, Exe: env.Exe, CancelGrace: env.CancelGrace,
		Snapshot: env.Snapshot, WorkDir: env.WorkDir, Images: images, Log: cmp.Or(env.Log, slog.New(slog.DiscardHandler)).With("compute", c.Name)})
	// A compute that cannot make a client (no kubeconfig outside a
	// cluster, one that does not parse) is the request's fault: its
	// CheckError names the field and holds no secret.
	if ce := (*kubernetes.CheckError)(nil); errors.As(err, &ce) {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: ce.Error(), Err: err}
	}
	if err != nil {
		return nil, err
	}
	if host, ok := loopbackURL(env.APIURL); ok {
		// Its pods would start and their runners never reach the server,
		// each job Queued without a word: refused here, after the
		// compute file's own errors, as docker nodes are on such a server.
		t.Close()
		return nil, apperr.Invalid("compute %s: a kubernetes compute's pods call this server at the URL it advertises, %s, and %s is a loopback address, which no pod can reach; start the server with --advertise-url http://ADDRESS:PORT, an address of this host that the cluster's pods can reach (and --addr to listen on it)", c.Name, env.APIURL, host)
	}
	return t, nil
}

// targetFactory is the workspace's TargetFactory over the registry.
func targetFactory(types map[string]newTarget, env targetEnv) workspace.TargetFactory {
	names := slices.Sorted(maps.Keys(types))
	return func(c *spec.Compute) (compute.Target, error) {
		mk, ok := types[c.Type]
		if !ok {
			return nil, apperr.Invalid("type: compute type %q is not available on this server yet; available: %s", c.Type, strings.Join(names, ", "))
		}
		t, err := mk(env, c)
		if err != nil {
			if strings.HasPrefix(err.Error(), "compute "+c.Name+":") {
				return nil, err // named already (spec.Compute.Validate's errors are)
			}
			return nil, fmt.Errorf("compute %s: %w", c.Name, err)
		}
		return t, nil
	}
}

// snapshotExtractor is targetEnv.Snapshot over the server's blob store.
func snapshotExtractor(blobs *blob.Store) func(ctx context.Context, id, dest string) error {
	return func(_ context.Context, id, dest string) error {
		f, err := blobs.Open(id)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		m, err := snapshot.ParseManifest(data)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		return snapshot.Extract(m, dest, func(d string) (io.ReadCloser, error) { return blobs.Open(d) })
	}
}

// loopbackURL says whether raw, a URL the server advertises, names a
// loopback host (localhost, 127.0.0.0/8, ::1) or an unspecified one
// (0.0.0.0, ::), which only processes on this machine can call, and
// returns that host.
func loopbackURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", false
	}
	h := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return u.Hostname(), true
	}
	ip := net.ParseIP(h)
	return u.Hostname(), ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}
