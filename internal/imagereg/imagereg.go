// Package imagereg pushes the images Ferry builds to an OCI registry that a
// cluster pulls from (a kubernetes compute's `registry:`), with
// go-containerregistry: environment images the server's Docker engine
// built, read from `docker save`'s tarball, and the runner's own image, one
// layer holding Ferry's static binary.
//
// Images are tagged by what identifies their content (an environment's
// hash, the binary's SHA-256), so Lookup finds what an earlier push left,
// and the cluster is given them by digest. A registry on a loopback or
// private address is spoken to over plain HTTP, others over HTTPS (as
// go-containerregistry's name package decides).
package imagereg

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is one registry and repository prefix, with the credentials
// to push there. Its methods are safe for concurrent use.
type Registry struct {
	addr string // HOST[:PORT][/PREFIX]
	auth authn.Authenticator
}

// New returns the registry at addr (HOST[:PORT][/PREFIX], as spec.Compute
// validates it), logged in to with username and password when given.
func New(addr, username, password string) (*Registry, error) {
	r := &Registry{addr: strings.TrimSuffix(addr, "/"), auth: authn.Anonymous}
	if username != "" || password != "" {
		r.auth = &authn.Basic{Username: username, Password: password}
	}
	if _, err := name.NewRepository(r.repo("x")); err != nil {
		return nil, fmt.Errorf("registry: %q is not a registry address: %v", addr, err)
	}
	return r, nil
}

// Host is the registry's host[:port].
func (r *Registry) Host() string {
	host, _, _ := strings.Cut(r.addr, "/")
	return host
}

func (r *Registry) repo(repo string) string { return r.addr + "/" + repo }

// Ref is the reference of repo's image with digest, what pods are given.
func (r *Registry) Ref(repo, digest string) string { return r.repo(repo) + "@" + digest }

func (r *Registry) options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(r.auth)}
}

func (r *Registry) tag(repo, tag string) (name.Tag, error) {
	return name.NewTag(r.repo(repo) + ":" + tag)
}

// Lookup returns the digest of repo:tag and true when the registry has
// it, "" and false when it has not.
func (r *Registry) Lookup(ctx context.Context, repo, tag string) (string, bool, error) {
	ref, err := r.tag(repo, tag)
	if err != nil {
		return "", false, err
	}
	d, err := remote.Head(ref, r.options(ctx)...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return "", false, nil
		}
		return "", false, r.problem("look up "+ref.String(), err)
	}
	return d.Digest.String(), true, nil
}

// PushTarball pushes the one image of a `docker save` tarball as
// repo:tag and returns its digest.
func (r *Registry) PushTarball(ctx context.Context, path, repo, tag string) (string, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return "", fmt.Errorf("read the saved image %s: %w", path, err)
	}
	return r.Push(ctx, img, repo, tag)
}

// Push pushes img as repo:tag and returns its digest. Layers the
// registry has already are not sent again.
func (r *Registry) Push(ctx context.Context, img v1.Image, repo, tag string) (string, error) {
	ref, err := r.tag(repo, tag)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, r.options(ctx)...); err != nil {
		return "", r.problem("push "+ref.String(), err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// problem words a registry's error for a job's reason: what failed, the
// registry's own words, and what to check. It never holds the password.
func (r *Registry) problem(what string, err error) error {
	hint := "check that the registry runs and the Ferry server reaches " + r.Host()
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			hint = "check the compute's registry_credentials: the registry refused them"
		default:
			hint = fmt.Sprintf("the registry answered HTTP %d", te.StatusCode)
		}
	}
	return fmt.Errorf("registry %s: %s: %v; %s", r.Host(), what, err, hint)
}
