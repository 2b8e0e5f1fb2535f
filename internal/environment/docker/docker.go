// Package docker is a node's Docker engine as environments need it: it
// builds and tags environment images (environment.Images) through the moby
// client. It is apart from package environment so that the workspace,
// which resolves and hashes environments, does not link an HTTP client.
package docker

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/ferry-ml/ferry/internal/environment"
)

// Engine is a node's Docker engine, reached through the moby client with
// the usual DOCKER_HOST settings. It implements environment.Images.
type Engine struct {
	API *client.Client
}

var _ environment.Images = (*Engine)(nil)

// Connect returns the node's Docker engine, or an error that says why
// there is none (not installed, not running, no permission).
func Connect(ctx context.Context) (*Engine, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := c.Ping(pctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("docker engine not reachable at %s: %w", c.DaemonHost(), err)
	}
	c.NegotiateAPIVersion(ctx)
	return &Engine{API: c}, nil
}

// Has implements environment.Images.
func (d *Engine) Has(ctx context.Context, tag string) bool {
	_, err := d.API.ImageInspect(ctx, tag)
	return err == nil
}

// Remove implements environment.Images.
func (d *Engine) Remove(ctx context.Context, tag string) error {
	_, err := d.API.ImageRemove(ctx, tag, image.RemoveOptions{PruneChildren: true})
	return err
}

// Ensure implements environment.Images.
func (d *Engine) Ensure(ctx context.Context, s *environment.Spec, contextDir, tag string, log io.Writer) (int64, error) {
	labels := map[string]string{"ferry.environment": s.Hash()}
	switch {
	case s.Kind == environment.KindBuild:
		if err := d.build(ctx, contextDir, s.DockerfilePath, tag, labels, log); err != nil {
			return 0, err
		}
	case s.Kind == environment.KindImage && s.CondaFile == "":
		if err := d.present(ctx, s.Image, log); err != nil {
			return 0, err
		}
		if err := d.API.ImageTag(ctx, s.Image, tag); err != nil {
			return 0, fmt.Errorf("tag %s as %s: %w", s.Image, tag, err)
		}
	case s.Kind == environment.KindImage:
		if err := d.present(ctx, s.Image, log); err != nil {
			return 0, err
		}
		dockerfile, err := condaDockerfile(s.Image, contextDir, s.CondaFile)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(contextDir, ".ferry.Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			return 0, err
		}
		if err := d.build(ctx, contextDir, ".ferry.Dockerfile", tag, labels, log); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("environment kind %s is not an image", s.Kind)
	}
	info, err := d.API.ImageInspect(ctx, tag)
	if err != nil {
		return 0, fmt.Errorf("inspect %s: %w", tag, err)
	}
	return info.Size, nil
}

// present makes sure ref is on the engine, pulling it when it is not.
func (d *Engine) present(ctx context.Context, ref string, log io.Writer) error {
	if d.Has(ctx, ref) {
		return nil
	}
	fmt.Fprintf(log, "ferry: image %s is not on this node; pulling it\n", ref)
	body, err := d.API.ImagePull(ctx, ref, image.PullOptions{})
	if err == nil {
		err = jsonmessage.DisplayJSONMessagesStream(body, log, 0, false, nil)
		body.Close()
	}
	if err != nil {
		fmt.Fprintf(log, "ferry: pull %s: %v\n", ref, err)
		return fmt.Errorf("%w: image %s is not on this node and could not be pulled (%v); build it there, or use build: with a Dockerfile FROM an image the node has", environment.ErrBuild, ref, err)
	}
	return nil
}

// build runs a classic (v1) build of contextDir: it needs no BuildKit and
// streams plain lines, which is what a job's log wants.
func (d *Engine) build(ctx context.Context, contextDir, dockerfile, tag string, labels map[string]string, log io.Writer) error {
	if _, err := os.Stat(filepath.Join(contextDir, filepath.FromSlash(dockerfile))); err != nil {
		return fmt.Errorf("%w: build.dockerfile_path: %s is not in the build context", environment.ErrBuild, dockerfile)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(contextDir, pw)) }()
	resp, err := d.API.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: dockerfile, Labels: labels,
		Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("%w: docker build: %v", environment.ErrBuild, err)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, log, 0, false, nil); err != nil {
		fmt.Fprintf(log, "ferry: docker build: %v\n", err)
		return fmt.Errorf("%w: docker build failed (%v); its output is in the log above", environment.ErrBuild, err)
	}
	return nil
}

// tarDir writes the folder dir as an uncompressed tar stream, the form the
// engine takes a build context in. Symlinks are kept as links.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// condaDockerfile is the Dockerfile that puts a conda file on top of a base
// image, as Azure does for `image` + `conda_file`. With conda (or mamba,
// micromamba) in the image it updates the base env; without, a pip-only
// conda file becomes a virtualenv first on PATH, as on a host node.
func condaDockerfile(base, contextDir, condaFile string) (string, error) {
	data, err := os.ReadFile(filepath.Join(contextDir, condaFile))
	if err != nil {
		return "", fmt.Errorf("conda_file: %w", err)
	}
	pip, others, err := environment.CondaPackages(condaFile, data)
	if err != nil {
		return "", fmt.Errorf("%w: %v", environment.ErrBuild, err)
	}
	reqs := strings.Join(pip, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(contextDir, ".ferry.requirements.txt"), []byte(reqs), 0o644); err != nil {
		return "", err
	}
	conda := `if command -v micromamba >/dev/null; then micromamba install -y -n base -f /ferry/conda.yml; ` +
		`elif command -v mamba >/dev/null; then mamba env update -n base -f /ferry/conda.yml; ` +
		`elif command -v conda >/dev/null; then conda env update -n base -f /ferry/conda.yml; `
	var pipOnly string
	if len(others) > 0 {
		pipOnly = fmt.Sprintf(`else echo "ferry: the image has no conda, mamba or micromamba, and the conda file needs conda for %s" >&2; exit 1; fi`, strings.Join(others, ", "))
	} else {
		pipOnly = `else python3 -m venv /opt/ferry-env && /opt/ferry-env/bin/python -m pip install --no-input --disable-pip-version-check -r /ferry/requirements.txt; fi`
	}
	return "FROM " + base + "\n" +
		"COPY " + condaFile + " /ferry/conda.yml\n" +
		"COPY .ferry.requirements.txt /ferry/requirements.txt\n" +
		"RUN " + conda + pipOnly + "\n" +
		"ENV PATH=/opt/ferry-env/bin:$PATH\n", nil
}
