// Package envimage builds the environment images a cluster's pods run
// and pushes them to the registry it pulls from (a kubernetes compute's
// `registry:`), each once. Training jobs on the kubernetes target and
// online deployments on a kubernetes compute share it: an environment
// Ferry builds (a Dockerfile, or a conda file on a base image,
// environment.NeedsImageBuild) is built on the server's Docker engine as
// the docker provider builds it, pushed tagged by the environment's hash,
// and run by digest. A Pusher's locks keep concurrent callers for one
// image from building it twice, and its digests remember what this
// server pushed or found; a restarted server finds the tag in the
// registry and pushes nothing.
package envimage

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/environment/docker"
	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/tailbuf"
)

// Repo is the repository of environment images under the registry.
const Repo = "ferry-env"

// Config sets up a Pusher.
type Config struct {
	// Registry is where images go, logged in to.
	Registry *imagereg.Registry
	// Snapshot extracts a stored snapshot (an environment's files) into
	// the folder dest. Nil: environments with files cannot be built.
	Snapshot func(ctx context.Context, id, dest string) error
	// WorkDir is where builds keep their files meanwhile; "" is the
	// system's temporary folder.
	WorkDir string
	// Log gets a line for each build and push; nil discards.
	Log *slog.Logger
}

// Pusher puts images in one registry, each once. Its methods are safe
// for concurrent use.
type Pusher struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	locks   map[string]*sync.Mutex // by repo:tag
	digests map[string]string      // by repo:tag
}

// New returns a Pusher to cfg.Registry.
func New(cfg Config) (*Pusher, error) {
	if cfg.Registry == nil {
		return nil, errors.New("envimage: Config.Registry is required")
	}
	return &Pusher{cfg: cfg, log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)),
		locks: map[string]*sync.Mutex{}, digests: map[string]string{}}, nil
}

// Registry is the registry the Pusher pushes to.
func (p *Pusher) Registry() *imagereg.Registry { return p.cfg.Registry }

// Ensure returns the digest of repo:tag in the registry, calling push
// to put it there when the registry has not got it. Concurrent calls
// for one repo:tag call push once; once known, a digest is not looked
// up again.
func (p *Pusher) Ensure(ctx context.Context, repo, tag string, push func() (string, error)) (string, error) {
	key := repo + ":" + tag
	p.mu.Lock()
	l, ok := p.locks[key]
	if !ok {
		l = &sync.Mutex{}
		p.locks[key] = l
	}
	p.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	p.mu.Lock()
	d, ok := p.digests[key]
	p.mu.Unlock()
	if ok {
		return d, nil
	}
	d, found, err := p.cfg.Registry.Lookup(ctx, repo, tag)
	if err != nil {
		return "", err
	}
	if !found {
		if d, err = push(); err != nil {
			return "", err
		}
	}
	p.mu.Lock()
	p.digests[key] = d
	p.mu.Unlock()
	return d, nil
}

// EnvImage is the reference, by digest, of the image of env (which
// environment.NeedsImageBuild) in the registry: built on the server's
// Docker engine and pushed, unless the registry has it already. A failed
// build's error ends with the build's last output.
func (p *Pusher) EnvImage(ctx context.Context, env *environment.Spec) (string, error) {
	if !environment.NeedsImageBuild(env) {
		return "", fmt.Errorf("envimage: environment %s is not one Ferry builds an image of", env.Describe())
	}
	h := env.Hash()
	d, err := p.Ensure(ctx, Repo, h, func() (string, error) { return p.buildAndPush(ctx, env, h) })
	if err != nil {
		return "", fmt.Errorf("preparing the environment's image (%s): %w", env.Describe(), err)
	}
	return p.cfg.Registry.Ref(Repo, d), nil
}

// buildAndPush builds env's image on the server's Docker engine, as the
// docker provider builds it, and pushes it tagged h.
func (p *Pusher) buildAndPush(ctx context.Context, env *environment.Spec, h string) (string, error) {
	if env.Context != "" && p.cfg.Snapshot == nil {
		return "", fmt.Errorf("this server cannot read the environment's files")
	}
	work, err := os.MkdirTemp(p.cfg.WorkDir, "ferry-envimage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	contextDir := filepath.Join(work, "context")
	if err := os.Mkdir(contextDir, 0o755); err != nil {
		return "", err
	}
	if env.Context != "" {
		if err := p.cfg.Snapshot(ctx, env.Context, contextDir); err != nil {
			return "", fmt.Errorf("reading the environment's files: %w", err)
		}
	}
	d, err := docker.Connect(ctx)
	if err != nil {
		return "", fmt.Errorf("the server builds this environment's image on its Docker engine, and has none: %w", err)
	}
	defer d.API.Close()
	tag := environment.ImageTag(h)
	out := tailbuf.New(4096)
	p.log.Info("building an environment's image", "environment", env.Describe(), "tag", tag)
	if _, err := d.Ensure(ctx, env, contextDir, tag, out); err != nil {
		return "", fmt.Errorf("%w; the build's last output:\n%s", err, strings.TrimSpace(out.String()))
	}
	saved := filepath.Join(work, "image.tar")
	if err := save(ctx, d, tag, saved); err != nil {
		return "", err
	}
	reg := p.cfg.Registry
	digest, err := reg.PushTarball(ctx, saved, Repo, h)
	// The registry keeps the image from now on: the engine's copy goes,
	// so that builds do not pile up on the server (its base stays).
	if rerr := d.Remove(context.WithoutCancel(ctx), tag); rerr != nil {
		p.log.Warn("could not remove a pushed image from the server's engine", "tag", tag, "err", rerr)
	}
	if err != nil {
		return "", err
	}
	p.log.Info("pushed an environment's image", "environment", env.Describe(), "image", reg.Ref(Repo, digest))
	return digest, nil
}

// save writes the engine's image tag as a `docker save` tarball at path.
func save(ctx context.Context, d *docker.Engine, tag, path string) error {
	rc, err := d.API.ImageSave(ctx, []string{tag})
	if err != nil {
		return fmt.Errorf("docker save %s: %w", tag, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("docker save %s: %w", tag, err)
	}
	return f.Close()
}

// DockerConfig is the .dockerconfigjson of an imagePullSecret that logs
// in to the registry at host with username and password, or nil when
// there is no username. It holds the password: a Secret's data only.
func DockerConfig(host, username, password string) ([]byte, error) {
	if username == "" {
		return nil, nil
	}
	auth := base64.StdEncoding.EncodeToString([]byte(username + ":" + password))
	return json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
		"username": username, "password": password, "auth": auth}}})
}

// Pushers hands out one Pusher per registry and login, so that every
// user of a registry in a server (the kubernetes target's jobs, online
// deployments) builds and pushes each image once. Safe for concurrent
// use.
type Pushers struct {
	// Snapshot, WorkDir and Log are each Pusher's (see Config).
	Snapshot func(ctx context.Context, id, dest string) error
	WorkDir  string
	Log      *slog.Logger

	mu sync.Mutex
	by map[[32]byte]*Pusher
}

// For returns the Pusher to the registry at addr (HOST[:PORT][/PREFIX])
// logged in to with username and password ("" for none).
func (ps *Pushers) For(addr, username, password string) (*Pusher, error) {
	key := sha256.Sum256([]byte(addr + "\x00" + username + "\x00" + password))
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.by[key]; p != nil {
		return p, nil
	}
	reg, err := imagereg.New(addr, username, password)
	if err != nil {
		return nil, err
	}
	log := cmp.Or(ps.Log, slog.New(slog.DiscardHandler)).With("registry", reg.Host())
	p, err := New(Config{Registry: reg, Snapshot: ps.Snapshot, WorkDir: ps.WorkDir, Log: log})
	if err != nil {
		return nil, err
	}
	if ps.by == nil {
		ps.by = map[[32]byte]*Pusher{}
	}
	ps.by[key] = p
	return p, nil
}
