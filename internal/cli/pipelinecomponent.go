package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// expandPipelineComponents reads the pipeline component files that a
// pipeline's steps name (type: pipeline steps, or any step whose
// component file is a pipeline) and replaces each such step by the
// component's steps, again for pipeline components within them. Paths in
// a component file are relative to that file; they are rewritten
// relative to the pipeline file, where the rest of the client reads them.
func expandPipelineComponents(src specFile, p *spec.PipelineJob) error {
	if r := p.Root; r != nil && r.Subpipeline == nil && r.Component != nil {
		// The job's whole pipeline is a pipeline component (component:
		// instead of jobs:).
		f := pathField{file: src, field: "component", value: r.Component.Ref}
		if r.Component.IsRegistered() {
			return f.errorf("%s: Ferry registers no pipeline components; name the pipeline component's file (component: ./pipeline.yml)", r.Component.Ref)
		}
		sub, err := readPipelineComponent(src, f)
		if err != nil {
			return err
		}
		r.Subpipeline, r.Component = sub, nil
	}
	for range 10 {
		found := false
		for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
			st := p.Jobs[n]
			if st == nil || st.Subpipeline != nil || st.Component == nil || st.Component.Resolved != nil || st.Component.IsRegistered() || st.IsSweep() {
				continue
			}
			f := pathField{file: src, field: "jobs." + n + ".component", value: st.Component.Ref}
			data, err := os.ReadFile(f.path())
			if errors.Is(err, os.ErrNotExist) {
				return f.notFound()
			} else if err != nil {
				return f.errorf("%v", err)
			}
			if !spec.IsPipelineFile(data) {
				if st.Type == "pipeline" {
					return f.errorf("%s is not a pipeline component (type: pipeline with jobs:); a type: pipeline step runs one", st.Component.Ref)
				}
				continue
			}
			sub, err := readPipelineComponent(src, f)
			if err != nil {
				return err
			}
			st.Subpipeline, st.Component, found = sub, nil, true
		}
		if err := p.ExpandPipelineSteps(); err != nil {
			return src.parseError(err)
		}
		if !found {
			return nil
		}
	}
	return fmt.Errorf("%s: pipeline components nest more than 10 deep; is one a step of itself?", src.name)
}

// readPipelineComponent reads the pipeline component file that field f of
// src names, with its local paths made relative to src's folder.
func readPipelineComponent(src specFile, f pathField) (*spec.PipelineJob, error) {
	data, err := os.ReadFile(f.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, f.notFound()
	} else if err != nil {
		return nil, f.errorf("%v", err)
	}
	if !spec.IsPipelineFile(data) {
		return nil, f.errorf("%s is not a pipeline component (type: pipeline with jobs:)", f.value)
	}
	sub, err := spec.ParsePipelineComponent(data)
	if err != nil {
		return nil, fmt.Errorf("%s (the pipeline component that %s names in %s): %w", f.path(), f.field, src.name, err)
	}
	rebasePipeline(sub, filepath.Dir(f.path()), filepath.Dir(src.name))
	return sub, nil
}

// rebasePipeline rewrites the local paths of a pipeline component read
// from a file in dir from (component files, inline steps' code and
// environment files, local data) as paths relative to dir to.
func rebasePipeline(sub *spec.PipelineJob, from, to string) {
	re := func(p string) string {
		if p == "" || isRemote(p) || spec.IsDataRef(p) {
			return p
		}
		p = strings.TrimPrefix(p, "file:")
		if filepath.IsAbs(p) {
			return p
		}
		abs := filepath.Join(from, p)
		if rel, err := filepath.Rel(to, abs); err == nil {
			return rel
		}
		return abs
	}
	for k, in := range sub.Inputs {
		if !in.IsLiteral() {
			in.Path = re(in.Path)
			sub.Inputs[k] = in
		}
	}
	for _, st := range sub.Jobs {
		if st == nil {
			continue
		}
		for k, in := range st.Inputs {
			if in.Value == nil && in.Binding == nil {
				in.Path = re(in.Path)
				st.Inputs[k] = in
			}
		}
		st.Code = re(st.Code)
		rebaseEnvironment(st.Environment, re)
		switch {
		case st.Subpipeline != nil:
			rebasePipeline(st.Subpipeline, from, to)
		case st.Component != nil && st.Component.Resolved != nil:
			st.Component.Resolved.Code = re(st.Component.Resolved.Code)
			for i, inc := range st.Component.Resolved.AdditionalIncludes {
				st.Component.Resolved.AdditionalIncludes[i] = re(inc)
			}
			rebaseEnvironment(st.Component.Resolved.Environment, re)
		case st.Component != nil && !st.Component.IsRegistered():
			st.Component.Ref = re(st.Component.Ref)
		}
	}
}

// rebaseEnvironment rewrites an inline environment's local files with re.
func rebaseEnvironment(e *spec.Environment, re func(string) string) {
	if e == nil {
		return
	}
	if strings.HasPrefix(e.Ref, spec.EnvironmentFilePrefix) {
		e.Ref = spec.EnvironmentFilePrefix + re(e.Ref)
	}
	e.CondaFile = re(e.CondaFile)
	if e.Build != nil {
		e.Build.Path = re(e.Build.Path)
	}
}

// uploadCodeWithIncludes uploads a component's code with its
// additional_includes: each file or folder, relative to the component
// file src, joins the code at its root under its own name.
func (a *app) uploadCodeWithIncludes(ctx context.Context, c *client.Client, src specFile, comp *spec.Component, prefix string, limit int64) (string, error) {
	opt := snapshot.BuildOptions{MaxSize: limit, UseIgnoreFiles: true, Cache: a.statCache()}
	field := prefix + "code"
	walk := func(f pathField) (*snapshot.Tree, error) {
		st, err := os.Stat(f.path())
		if errors.Is(err, os.ErrNotExist) {
			return nil, f.notFound()
		} else if err != nil {
			return nil, f.errorf("%v", err)
		}
		if st.IsDir() {
			return snapshot.Walk(f.path(), opt)
		}
		return snapshot.WalkFile(f.path(), opt)
	}
	tree := snapshot.Empty(field, opt)
	if comp.Code != "" {
		t, err := walk(pathField{file: src, field: field, value: comp.Code})
		if err != nil {
			return "", err
		}
		tree = t
	}
	for i, inc := range comp.AdditionalIncludes {
		f := pathField{file: src, field: fmt.Sprintf("%sadditional_includes[%d]", prefix, i), value: inc}
		t, err := walk(f)
		if err != nil {
			return "", err
		}
		under := filepath.Base(f.path())
		if st, err := os.Stat(f.path()); err == nil && !st.IsDir() {
			under = "" // a file is listed under its own name already
		}
		if err := tree.Include(t, under); err != nil {
			return "", f.errorf("%v", err)
		}
	}
	return a.sendTree(ctx, c, field, tree)
}
