package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/environment/docker"
	"github.com/ferry-ml/ferry/internal/imagereg"
)

// How images reach the cluster. An image environment without a conda
// file, and the compute's default image, are references the nodes pull
// (or already have) as they are. An environment Ferry builds (a
// Dockerfile, or a conda file on a base image) is built once on the
// server's Docker engine, as the docker provider builds it, pushed to the
// compute's registry tagged by the environment's hash, and run by digest;
// a later job with the same environment finds the tag and pushes
// nothing. With a registry the runner's binary comes the same way: a
// one-layer image of Ferry's static binary, tagged by its SHA-256, that an
// init container copies into the pod. Without one, the binary is mounted
// from the node (hostPath).

// envRepo is the repository of environment images under the registry.
const envRepo = "ferry-env"

// needsBuild says whether env is an image Ferry must build for the
// cluster, rather than one the cluster pulls as it is.
func needsBuild(env *environment.Spec) bool {
	return env != nil && (env.Kind == environment.KindBuild || (env.Kind == environment.KindImage && env.CondaFile != ""))
}

// images pushes what a target's pods need to its registry, each image
// once: its locks keep two launches of one environment from building it
// twice, and its digests remember what this server pushed or found.
type images struct {
	reg *imagereg.Registry

	mu      sync.Mutex
	locks   map[string]*sync.Mutex // by repo:tag
	digests map[string]string      // by repo:tag

	runnerOnce sync.Once
	runnerTag  string // the server binary's SHA-256
	runnerErr  error
}

func newImages(reg *imagereg.Registry) *images {
	return &images{reg: reg, locks: map[string]*sync.Mutex{}, digests: map[string]string{}}
}

// ensure returns the digest of repo:tag in the registry, calling push
// to put it there when the registry has not got it.
func (im *images) ensure(ctx context.Context, repo, tag string, push func() (string, error)) (string, error) {
	key := repo + ":" + tag
	im.mu.Lock()
	l, ok := im.locks[key]
	if !ok {
		l = &sync.Mutex{}
		im.locks[key] = l
	}
	im.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	im.mu.Lock()
	d, ok := im.digests[key]
	im.mu.Unlock()
	if ok {
		return d, nil
	}
	d, found, err := im.reg.Lookup(ctx, repo, tag)
	if err != nil {
		return "", err
	}
	if !found {
		if d, err = push(); err != nil {
			return "", err
		}
	}
	im.mu.Lock()
	im.digests[key] = d
	im.mu.Unlock()
	return d, nil
}

// runnerImage is the reference, by digest, of the runner's image in the
// registry.
func (t *Target) runnerImage(ctx context.Context) (string, error) {
	// The binary does not change under a running server: hashed once.
	t.images.runnerOnce.Do(func() { t.images.runnerTag, t.images.runnerErr = imagereg.RunnerTag(t.cfg.Exe) })
	tag, err := t.images.runnerTag, t.images.runnerErr
	if err != nil {
		return "", fmt.Errorf("registry: the runner's image: %w", err)
	}
	d, err := t.images.ensure(ctx, imagereg.RunnerRepo, tag, func() (string, error) {
		img, tag, err := imagereg.RunnerImage(t.cfg.Exe)
		if err != nil {
			return "", fmt.Errorf("registry: the runner's image: %w", err)
		}
		d, err := t.images.reg.Push(ctx, img, imagereg.RunnerRepo, tag)
		if err == nil {
			t.log.Info("kubernetes: pushed the runner's image", "image", t.images.reg.Ref(imagereg.RunnerRepo, d))
		}
		return d, err
	})
	if err != nil {
		return "", err
	}
	return t.images.reg.Ref(imagereg.RunnerRepo, d), nil
}

// envImage is the reference, by digest, of the image of env (which
// needsBuild) in the registry: built on the server's Docker engine and
// pushed, unless the registry has it already.
func (t *Target) envImage(ctx context.Context, env *environment.Spec) (string, error) {
	h := env.Hash()
	d, err := t.images.ensure(ctx, envRepo, h, func() (string, error) { return t.buildAndPush(ctx, env, h) })
	if err != nil {
		return "", fmt.Errorf("preparing the environment's image (%s): %w", env.Describe(), err)
	}
	return t.images.reg.Ref(envRepo, d), nil
}

// buildAndPush builds env's image on the server's Docker engine, as the
// docker provider builds it, and pushes it tagged h.
func (t *Target) buildAndPush(ctx context.Context, env *environment.Spec, h string) (string, error) {
	if env.Context != "" && t.cfg.Snapshot == nil {
		return "", fmt.Errorf("this server cannot read the environment's files")
	}
	work, err := os.MkdirTemp(t.cfg.WorkDir, "ferry-envimage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	contextDir := filepath.Join(work, "context")
	if err := os.Mkdir(contextDir, 0o755); err != nil {
		return "", err
	}
	if env.Context != "" {
		if err := t.cfg.Snapshot(ctx, env.Context, contextDir); err != nil {
			return "", fmt.Errorf("reading the environment's files: %w", err)
		}
	}
	d, err := docker.Connect(ctx)
	if err != nil {
		return "", fmt.Errorf("the server builds this environment's image on its Docker engine, and has none: %w", err)
	}
	defer d.API.Close()
	tag := environment.ImageTag(h)
	out := &tail{max: 4096}
	t.log.Info("kubernetes: building an environment's image", "environment", env.Describe(), "tag", tag)
	if _, err := d.Ensure(ctx, env, contextDir, tag, out); err != nil {
		return "", fmt.Errorf("%w; the build's last output:\n%s", err, out)
	}
	saved := filepath.Join(work, "image.tar")
	if err := save(ctx, d, tag, saved); err != nil {
		return "", err
	}
	digest, err := t.images.reg.PushTarball(ctx, saved, envRepo, h)
	// The registry keeps the image from now on: the engine's copy goes,
	// so that builds do not pile up on the server (its base stays).
	if rerr := d.Remove(context.WithoutCancel(ctx), tag); rerr != nil {
		t.log.Warn("kubernetes: could not remove a pushed image from the server's engine", "tag", tag, "err", rerr)
	}
	if err != nil {
		return "", err
	}
	t.log.Info("kubernetes: pushed an environment's image", "environment", env.Describe(), "image", t.images.reg.Ref(envRepo, digest))
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

// tail keeps the last max bytes written to it: a failed build's last
// words, for the job's reason.
type tail struct {
	max int
	buf bytes.Buffer
}

func (w *tail) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if over := w.buf.Len() - w.max; over > 0 {
		w.buf.Next(over)
	}
	return len(p), nil
}

func (w *tail) String() string { return strings.TrimSpace(w.buf.String()) }
