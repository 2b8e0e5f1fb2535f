// Package environment makes a job's software on a node: nothing (the
// node's own, user-managed), a Python virtualenv from a requirements file or
// a pip-only conda file, a conda env, or a container image (a named base,
// optionally with a conda file on top, or a Docker build context).
//
// An environment is identified by Spec.Hash: the SHA-256 of its normalised
// spec and of the content of every file it refers to (those files travel as
// one snapshot, Spec.Context). A node builds an environment once into its
// Cache and reuses it for every later job with the same hash; two runners
// that need the same unbuilt environment build it once, the second waiting
// on a file lock for the first (runners are separate processes). Builds write
// their tool's output to the job's log as they go; a failed build leaves
// nothing in the cache.
package environment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Kinds of environment.
const (
	KindUserManaged = "user_managed" // the node's own software; also no environment at all
	KindPython      = "python"       // virtualenv from Requirements
	KindConda       = "conda"        // conda env from CondaFile, or a virtualenv when it is pip-only and the node has no conda
	KindImage       = "image"        // run in Image, with CondaFile applied on top when set
	KindBuild       = "build"        // image built from the Context folder with DockerfilePath
)

// Spec is an environment resolved for building: what the job file or the
// registered environment says, with local paths replaced by names inside
// the Context snapshot. It travels to the node in the runner's assignment.
type Spec struct {
	Kind            string `json:"kind"`
	Image           string `json:"image,omitempty"`
	CondaFile       string `json:"conda_file,omitempty"`      // file name inside Context
	Requirements    string `json:"requirements,omitempty"`    // file name inside Context
	PythonVersion   string `json:"python_version,omitempty"`  // "3.11"; empty = the node's python3
	DockerfilePath  string `json:"dockerfile_path,omitempty"` // relative to the Context root
	InterpreterPath string `json:"interpreter_path,omitempty"`
	Context         string `json:"context,omitempty"` // snapshot id of the files it refers to

	// Name and Version of a registered environment, shown to people and
	// left out of the hash: the same software under two names is one build.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// Hash is the environment's identity: hex SHA-256 over the normalised spec,
// which includes the Context snapshot id, itself a hash over every file's
// path, mode and content.
func (s *Spec) Hash() string {
	n := *s
	n.Name, n.Version = "", ""
	b, err := json.Marshal(n) // struct fields marshal in a fixed order
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	sum := sha256.Sum256(append([]byte("ferry-environment-v1\n"), b...))
	return hex.EncodeToString(sum[:])
}

// NeedsImageBuild reports whether env is an image Ferry must build for a
// cluster that pulls its images (a Dockerfile, or a conda file on a base
// image), rather than one the cluster pulls as it is. A nil env needs
// none.
func NeedsImageBuild(env *Spec) bool {
	return env != nil && (env.Kind == KindBuild || (env.Kind == KindImage && env.CondaFile != ""))
}

// NeedsDocker reports whether the environment runs in a container.
func (s *Spec) NeedsDocker() bool { return s.Kind == KindImage || s.Kind == KindBuild }

// Describe is a short human description, for logs.
func (s *Spec) Describe() string {
	d := s.Kind
	switch s.Kind {
	case KindPython:
		d += " " + s.Requirements
	case KindConda:
		d += " " + s.CondaFile
	case KindImage:
		d += " " + s.Image
		if s.CondaFile != "" {
			d += " + " + s.CondaFile
		}
	case KindBuild:
		d += " " + s.DockerfilePath
	}
	if s.Name != "" {
		d = s.Name + ":" + s.Version + " (" + d + ")"
	}
	return d
}

// ContextPath is the local file or folder an inline environment refers to,
// relative to the job or environment file, and the field that names it; ""
// when it refers to none. The client snapshots it and sends its id with the
// environment.
func ContextPath(e *spec.Environment) (path, field string) {
	switch {
	case e == nil:
	case e.Build != nil:
		return e.Build.Path, "build.path"
	case e.Python != nil:
		return e.Python.Requirements, "python.requirements"
	case e.CondaFile != "":
		return e.CondaFile, "conda_file"
	}
	return "", ""
}

// ErrNoContext is returned by Resolve for an environment that refers to a
// file when no snapshot of it was given.
var ErrNoContext = errors.New("the environment's files were not uploaded")

// Resolve turns a validated inline environment into a Spec. context is
// the snapshot id of ContextPath(e), "" when it has none. A nil e is the
// node's own software.
func Resolve(e *spec.Environment, context string) (*Spec, error) {
	if e == nil {
		return &Spec{Kind: KindUserManaged}, nil
	}
	if e.Ref != "" {
		return nil, fmt.Errorf("environment %s is a reference; look it up before resolving", e.Ref)
	}
	p, field := ContextPath(e)
	if p != "" && context == "" {
		return nil, fmt.Errorf("%s: %w", field, ErrNoContext)
	}
	if p == "" && context != "" {
		return nil, fmt.Errorf("the environment refers to no file, but a snapshot was sent with it")
	}
	s := &Spec{Name: e.Name, Version: e.Version, Context: context}
	switch {
	case e.Build != nil:
		s.Kind = KindBuild
		s.DockerfilePath = filepath.ToSlash(filepath.Clean(e.Build.DockerfilePath))
		if e.Build.DockerfilePath == "" {
			s.DockerfilePath = "Dockerfile"
		}
	case e.Image != "":
		s.Kind, s.Image = KindImage, e.Image
		if e.CondaFile != "" {
			s.CondaFile = filepath.Base(e.CondaFile)
		}
	case e.Python != nil:
		s.Kind, s.Requirements, s.PythonVersion = KindPython, filepath.Base(e.Python.Requirements), e.Python.Version
	case e.CondaFile != "":
		s.Kind, s.CondaFile = KindConda, filepath.Base(e.CondaFile)
	default:
		s.Kind, s.InterpreterPath = KindUserManaged, e.InterpreterPath
	}
	return s, nil
}

// ImageTag is the tag a node gives the image of the environment with hash h.
func ImageTag(h string) string { return "ferry-env:" + h }

// Images is a container engine as the cache needs it; *Docker implements it.
// Methods are safe for concurrent use.
type Images interface {
	// Ensure makes the image of s (KindImage or KindBuild) and tags it tag:
	// it builds a Build context found in contextDir, or makes sure an
	// Image is on the engine (pulling it when it can) and, with a
	// CondaFile, builds that on top. The engine's output goes to log as
	// it comes. It returns the image's size in bytes. A failure of the
	// engine's build or pull wraps ErrBuild.
	Ensure(ctx context.Context, s *Spec, contextDir, tag string, log io.Writer) (int64, error)
	// Has reports whether the engine has an image tagged tag.
	Has(ctx context.Context, tag string) bool
	// Remove deletes the image tagged tag.
	Remove(ctx context.Context, tag string) error
}

// ErrBuild is wrapped by every error that says the environment cannot be
// made on this node: its build tool (pip, conda, the container engine)
// failed, with its output in the log given to Prepare, or the node lacks
// what the environment needs (an engine, a Python version, conda), or a
// file the environment names is wrong. The message says which.
var ErrBuild = errors.New("environment build failed")
