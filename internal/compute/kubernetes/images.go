package kubernetes

import (
	"context"
	"fmt"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/imagereg"
)

// How images reach the cluster. An image environment without a conda
// file, and the compute's default image, are references the nodes pull
// (or already have) as they are. An environment Ferry builds (a
// Dockerfile, or a conda file on a base image) is built once on the
// server's Docker engine and pushed to the compute's registry tagged by
// the environment's hash, and run by digest (package envimage, which
// online deployments on the compute share). With a registry the runner's
// binary comes the same way: a one-layer image of Ferry's static binary,
// tagged by its SHA-256, that an init container copies into the pod.
// Without one, the binary is mounted from the node (hostPath).

// needsBuild says whether env is an image Ferry must build for the
// cluster, rather than one the cluster pulls as it is.
func needsBuild(env *environment.Spec) bool { return environment.NeedsImageBuild(env) }

// runnerImage is the reference, by digest, of the runner's image in the
// registry.
func (t *Target) runnerImage(ctx context.Context) (string, error) {
	// The binary does not change under a running server: hashed once.
	t.runnerOnce.Do(func() { t.runnerTag, t.runnerErr = imagereg.RunnerTag(t.cfg.Exe) })
	tag, err := t.runnerTag, t.runnerErr
	if err != nil {
		return "", fmt.Errorf("registry: the runner's image: %w", err)
	}
	reg := t.images.Registry()
	d, err := t.images.Ensure(ctx, imagereg.RunnerRepo, tag, func() (string, error) {
		img, tag, err := imagereg.RunnerImage(t.cfg.Exe)
		if err != nil {
			return "", fmt.Errorf("registry: the runner's image: %w", err)
		}
		d, err := reg.Push(ctx, img, imagereg.RunnerRepo, tag)
		if err == nil {
			t.log.Info("kubernetes: pushed the runner's image", "image", reg.Ref(imagereg.RunnerRepo, d))
		}
		return d, err
	})
	if err != nil {
		return "", err
	}
	return reg.Ref(imagereg.RunnerRepo, d), nil
}

// envImage is the reference, by digest, of the image of env (which
// needsBuild) in the registry: built on the server's Docker engine and
// pushed, unless the registry has it already.
func (t *Target) envImage(ctx context.Context, env *environment.Spec) (string, error) {
	return t.images.EnvImage(ctx, env)
}
