package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// noteIgnored says which fields of a file were accepted but are not used.
func noteIgnored(w io.Writer, file string, ignored []string) {
	if len(ignored) > 0 {
		fmt.Fprintf(w, "%s: accepted, but not used by Ferry: %s\n", file, strings.Join(ignored, ", "))
	}
}

// registeredComponent looks up the registered component that field f
// names (azureml:NAME:VERSION, azureml:NAME@latest or a registry's
// azureml://registries/R/components/NAME/...). Ferry has no registries:
// a registry's reference is looked up among the workspace's components,
// with a note saying so.
func (a *app) registeredComponent(ctx context.Context, c *client.Client, f pathField) (*apitypes.Component, error) {
	name, version, err := spec.ParseComponentRef(f.value)
	if err != nil {
		return nil, f.errorf("%v", err)
	}
	got, err := c.GetComponent(ctx, name, version)
	if err != nil {
		return nil, f.errorf("%s", spec.RegistryMiss(f.value, err.Error()))
	}
	if note := spec.RegistryNote(f.value); note != "" {
		fmt.Fprintf(a.stderr, "%s: %s\n", f.field, note)
	}
	return got, nil
}

// uploadComponent uploads a component's code and environment files, each
// relative to the file src it is written in, and records their snapshots
// in it; prefix names its fields in messages (jobs.train.component.).
func (a *app) uploadComponent(ctx context.Context, c *client.Client, src specFile, comp *spec.Component, prefix string, limit int64) error {
	env, envSrc, envField, err := inlineEnvironmentFile(src, comp.Environment)
	if err != nil {
		return err
	}
	comp.Environment = env
	switch {
	case len(comp.AdditionalIncludes) > 0:
		id, err := a.uploadCodeWithIncludes(ctx, c, src, comp, prefix, limit)
		if err != nil {
			return err
		}
		comp.CodeSnapshot = id
	case comp.Code != "":
		id, err := a.upload(ctx, c, pathField{file: src, field: prefix + "code", value: comp.Code}, "", limit, true)
		if err != nil {
			return err
		}
		comp.CodeSnapshot = id
	}
	id, err := a.uploadEnvironmentFiles(ctx, c, prefix+envField, envSrc, comp.Environment, limit)
	if err != nil {
		return err
	}
	comp.EnvironmentSnapshot = id
	return nil
}

// stepFile is a component file a step names, read before anything is
// uploaded.
type stepFile struct {
	src  specFile
	comp *spec.Component
}

// createPipeline parses a pipeline job file, checks every registered
// component and data asset it names, reads the component files it names,
// then uploads its code and local inputs and submits it.
func (a *app) createPipeline(ctx context.Context, c *client.Client, o createOpts, data []byte) (*apitypes.Job, error) {
	req, err := a.pipelineRequest(ctx, c, specFile{name: o.file, data: data, sets: o.overrides()}, o.maxSnap)
	if err != nil {
		return nil, err
	}
	return c.SubmitPipeline(ctx, req)
}

// pipelineRequest is jobRequest for a pipeline job file: the request
// that submits it (`job create`) or that a schedule fires (`schedule
// create`).
func (a *app) pipelineRequest(ctx context.Context, c *client.Client, src specFile, maxSnap string) (apitypes.PipelineJobRequest, error) {
	var none apitypes.PipelineJobRequest
	p, err := spec.ParsePipelineJob(src.data, src.sets)
	if err != nil {
		return none, src.parseError(err)
	}
	limit, err := a.snapshotLimit(maxSnap)
	if err != nil {
		return none, err
	}
	if err := expandPipelineComponents(src, p); err != nil {
		return none, err
	}
	steps := slices.Sorted(maps.Keys(p.Jobs))
	// Every reference first: nothing is uploaded for a pipeline that
	// names a component, data asset or file that is not there.
	files := map[string]stepFile{}
	for _, n := range steps {
		ref := p.Jobs[n].Component
		if ref == nil || ref.Resolved != nil {
			continue
		}
		field := "jobs." + n + ".component"
		if p.Jobs[n].IsSweep() {
			field = "jobs." + n + ".trial"
		}
		f := pathField{file: src, field: field, value: ref.Ref}
		if ref.IsRegistered() {
			got, err := a.registeredComponent(ctx, c, f)
			if err != nil {
				return none, err
			}
			ref.Resolved = got.Spec // for the checks below; the server resolves it again
			continue
		}
		cdata, err := os.ReadFile(f.path())
		if errors.Is(err, os.ErrNotExist) {
			return none, f.notFound()
		} else if err != nil {
			return none, f.errorf("%v", err)
		}
		comp, err := spec.ParseComponent(cdata)
		if err != nil {
			return none, fmt.Errorf("%s (the component of step %s in %s): %w", f.path(), n, src.name, err)
		}
		noteIgnored(a.stderr, f.path(), comp.Ignored)
		comp.Ignored = nil
		files[n] = stepFile{src: specFile{name: f.path(), data: cdata}, comp: comp}
		ref.Resolved = comp
	}
	if err := p.Validate(); err != nil {
		return none, src.parseError(err)
	}
	noteIgnored(a.stderr, src.name, p.Ignored)
	if err := checkPipelineData(ctx, c, src, p); err != nil {
		return none, err
	}
	if err := checkReferences(ctx, c, src, pipelineReferences(p)); err != nil {
		return none, err
	}
	for _, n := range slices.Sorted(maps.Keys(files)) { // each component file's environment, against its own file
		if err := checkReferences(ctx, c, files[n].src, environmentReference("environment", files[n].comp.Environment)); err != nil {
			return none, err
		}
	}
	// Then the uploads.
	req := apitypes.PipelineJobRequest{InputSnapshots: map[string]string{}}
	for _, k := range slices.Sorted(maps.Keys(p.Inputs)) {
		in := p.Inputs[k]
		if in.IsLiteral() || in.Path == "" || spec.IsDataRef(in.Path) || isRemote(in.Path) {
			continue
		}
		id, err := a.upload(ctx, c, pathField{file: src, field: "inputs." + k + ".path", value: in.Path}, in.Type, limit, false)
		if err != nil {
			return none, err
		}
		req.InputSnapshots["inputs."+k] = id
	}
	for _, n := range steps {
		st := p.Jobs[n]
		for _, k := range slices.Sorted(maps.Keys(st.Inputs)) {
			in := st.Inputs[k]
			if in.Value != nil || in.Binding != nil || in.Path == "" || spec.IsDataRef(in.Path) || isRemote(in.Path) {
				continue
			}
			key := "jobs." + n + ".inputs." + k
			id, err := a.upload(ctx, c, pathField{file: src, field: key + ".path", value: in.Path}, in.Type, limit, false)
			if err != nil {
				return none, err
			}
			req.InputSnapshots[key] = id
		}
		switch {
		case st.Component == nil:
			// An inline command step: its code is relative to the pipeline file.
			comp := &spec.Component{Code: st.Code, Environment: st.Environment}
			if err := a.uploadComponent(ctx, c, src, comp, "jobs."+n+".", limit); err != nil {
				return none, err
			}
			st.Environment, st.CodeSnapshot, st.EnvironmentSnapshot = comp.Environment, comp.CodeSnapshot, comp.EnvironmentSnapshot
		case st.Component.IsRegistered():
			st.Component.Resolved = nil // the server resolves it
		case files[n].comp != nil:
			if err := a.uploadComponent(ctx, c, files[n].src, files[n].comp, "", limit); err != nil {
				return none, err
			}
		default:
			// An inline component: its code is relative to the pipeline file.
			if err := a.uploadComponent(ctx, c, src, st.Component.Resolved, "jobs."+n+".component.", limit); err != nil {
				return none, err
			}
		}
	}
	raw, err := jsonOf(p)
	if err != nil {
		return none, err
	}
	req.Spec = raw
	return req, nil
}

// checkPipelineData looks up the data assets the pipeline's inputs and
// its steps' inputs name, before anything is uploaded.
func checkPipelineData(ctx context.Context, c *client.Client, src specFile, p *spec.PipelineJob) error {
	check := func(field, typ, path string) error {
		if !spec.IsDataRef(path) {
			return nil
		}
		f := pathField{file: src, field: field, value: path}
		if spec.IsModelType(typ) {
			if err := checkModelInput(ctx, c, path); err != nil {
				return f.errorf("%v", err)
			}
			return nil
		}
		name, version, err := spec.ParseDataRef(path)
		if err != nil {
			return f.errorf("%v", err)
		}
		if _, err := c.GetData(ctx, name, version); err != nil {
			return f.errorf("%v", err)
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(p.Inputs)) {
		if err := check("inputs."+k+".path", p.Inputs[k].Type, p.Inputs[k].Path); err != nil {
			return err
		}
	}
	for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
		for _, k := range slices.Sorted(maps.Keys(p.Jobs[n].Inputs)) {
			in := p.Jobs[n].Inputs[k]
			if err := check("jobs."+n+".inputs."+k+".path", in.Type, in.Path); err != nil {
				return err
			}
		}
	}
	return nil
}

// showPipeline adds a pipeline job's steps to `job show`.
func showPipeline(w *tabwriter.Writer, j *apitypes.Job) {
	if p := j.Pipeline; p != nil {
		if c := p.DefaultCompute(); c != "" {
			fmt.Fprintf(w, "default compute:\t%s\n", c)
		}
		if p.ContinueOnStepFailure() {
			fmt.Fprintf(w, "continue on step failure:\ttrue\n")
		}
		if p.Settings != nil && p.Settings.ForceRerun {
			fmt.Fprintf(w, "force rerun:\ttrue\n")
		}
		if len(p.Ignored) > 0 {
			fmt.Fprintf(w, "not used:\t%s\n", strings.Join(p.Ignored, ", "))
		}
	}
	fmt.Fprintf(w, "steps:\t%d\n", len(j.Steps))
	for _, st := range j.Steps {
		line := st.Status
		if st.ReusedFrom != "" {
			line += " (reused " + st.ReusedFrom + ")"
		}
		job := st.Job
		if job == "" {
			job = "-"
		}
		extra := ""
		if len(st.DependsOn) > 0 {
			extra = " after " + strings.Join(st.DependsOn, ", ")
		}
		reason := ""
		if st.ReusedFrom == "" && (st.Status == apitypes.StatusFailed || st.Status == apitypes.StepSkipped || st.Status == apitypes.StatusCanceled || (st.Sweep && st.Reason != "")) {
			reason = ": " + oneLine(st.Reason) // a sweep's: its trials and best trial
		}
		fmt.Fprintf(w, "  %s\t%s on %s, job %s%s%s\n", st.Name, line, st.Compute, job, extra, reason)
	}
}

// followPipeline streams the logs of a pipeline's steps as they run, each
// line prefixed with its step's name, until the pipeline ends.
func (a *app) followPipeline(ctx context.Context, c *client.Client, name string) error {
	offsets := map[string]int64{}
	partial := map[string][]byte{}
	done := map[string]bool{}
	announced := map[string]string{}
	for {
		j, err := c.GetJob(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(a.stderr, "\nstopped streaming; job %s goes on (`%s job stream %s` to follow it again)\n", name, a.self, name)
				return &exitError{code: 130}
			}
			return err
		}
		for _, st := range j.Steps {
			ended := apitypes.IsTerminal(st.Status) || st.Status == apitypes.StepSkipped
			announce := func() {
				seen := st.Status
				if st.Sweep {
					seen += st.Reason // a sweep step has no log: its progress is its reason
				}
				if announced[st.Name] == seen {
					return
				}
				announced[st.Name] = seen
				msg := st.Status
				if st.ReusedFrom != "" {
					msg += ", reused the outputs of " + st.ReusedFrom
				} else if st.Reason != "" && ((ended && st.Status != apitypes.StatusCompleted) || st.Sweep) {
					msg += ": " + oneLine(st.Reason)
				}
				fmt.Fprintf(a.stderr, "step %s: %s\n", st.Name, msg)
			}
			if !ended {
				announce() // before its log; an end after it
			}
			if st.Job == "" || done[st.Job] {
				announce()
				continue
			}
			var buf bytes.Buffer
			n, err := c.StreamLogs(ctx, st.Job, offsets[st.Job], false, &buf)
			if err == nil {
				offsets[st.Job] = n
			}
			data := append(partial[st.Job], buf.Bytes()...)
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					break
				}
				fmt.Fprintf(a.stdout, "[%s] %s\n", st.Name, data[:i])
				data = data[i+1:]
			}
			partial[st.Job] = data
			if apitypes.IsTerminal(st.Status) && err == nil {
				if len(data) > 0 {
					fmt.Fprintf(a.stdout, "[%s] %s\n", st.Name, data)
				}
				done[st.Job] = true
			}
			announce()
		}
		if apitypes.IsTerminal(j.Status) {
			return a.finalSummary(j)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// downloadPipeline writes each step's named outputs under DIR/STEP/
// named-outputs/NAME, and the pipeline's own outputs under
// DIR/named-outputs/NAME.
func downloadPipeline(ctx context.Context, c *client.Client, j *apitypes.Job, dir, only string) ([]string, error) {
	var where []string
	if j.Outputs != nil {
		for _, k := range slices.Sorted(maps.Keys(j.Outputs.Named)) {
			if only != "" && k != only {
				continue
			}
			p := filepath.Join(dir, "named-outputs", k)
			if err := c.Download(ctx, j.Outputs.Named[k], p); err != nil {
				return nil, err
			}
			where = append(where, p)
		}
	}
	for _, st := range j.Steps {
		if st.Job == "" {
			continue
		}
		out, err := c.Outputs(ctx, st.Job)
		if err != nil {
			return nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(out.Named)) {
			if only != "" && k != only {
				continue
			}
			p := filepath.Join(dir, st.Name, "named-outputs", k)
			if err := c.Download(ctx, out.Named[k], p); err != nil {
				return nil, err
			}
			where = append(where, p)
		}
	}
	return where, nil
}

// pipelineReferences lists the computes and registered environments a
// pipeline file and its inline steps name, for the check made before
// anything is uploaded (component files' environments are checked
// against their own files). Azure's compute name
// serverless is left to the workspace, which reads it as no compute
// unless it has a compute of that name.
func pipelineReferences(p *spec.PipelineJob) []apitypes.Reference {
	var refs []apitypes.Reference
	addCompute := func(field, ref string) {
		if name := strings.TrimPrefix(ref, "azureml:"); name != "" && name != "serverless" && !strings.Contains(ref, "${{") {
			refs = append(refs, apitypes.Reference{Field: field, Kind: "compute", Ref: ref})
		}
	}
	addCompute("compute", p.Compute)
	if p.Settings != nil {
		addCompute("settings.default_compute", p.Settings.DefaultCompute)
	}
	for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
		st := p.Jobs[n]
		addCompute("jobs."+n+".compute", st.Compute)
		refs = append(refs, environmentReference("jobs."+n+".environment", st.Environment)...)
	}
	return refs
}

// environmentReference is the reference an environment field makes to a
// registered or catalog environment, if it makes one.
func environmentReference(field string, e *spec.Environment) []apitypes.Reference {
	if e == nil || e.Ref == "" || strings.HasPrefix(e.Ref, spec.EnvironmentFilePrefix) {
		return nil
	}
	return []apitypes.Reference{{Field: field, Kind: "environment", Ref: e.Ref}}
}
