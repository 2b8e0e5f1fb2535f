package spec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// A pipeline component (Azure's pipelineComponent files: type: pipeline,
// inputs and outputs declared as a command component's, and jobs: as a
// pipeline job's) is a pipeline used as one step of another. Ferry runs
// it by expansion: the step is replaced by the component's own steps,
// named STEP-INNER, with the component's inputs taken from what the step
// gives them and its outputs from the inner steps bound to them. The
// workspace only ever sees command and sweep steps.

// PipelineStepSeparator joins an expanded pipeline step's name to the
// names of its inner steps: train-score is the step score of the
// pipeline component that step train runs.
const PipelineStepSeparator = "-"

// maxPipelineDepth bounds pipeline components within pipeline components.
const maxPipelineDepth = 10

// IsPipelineComponent says whether the step runs a pipeline component: it
// is written type: pipeline, or the component it names (read, or written
// inline) is a pipeline.
func (st *PipelineStep) IsPipelineComponent() bool {
	return st != nil && (st.Type == "pipeline" || st.Subpipeline != nil)
}

// ParsePipelineComponent reads a pipeline component file: type:
// pipeline, with inputs and outputs declared (type, optional, default)
// and jobs: the steps. It is checked when the pipeline that uses it is
// expanded, where what its inputs are given is known.
func ParsePipelineComponent(data []byte) (*PipelineJob, error) {
	root, err := parseTree(data, "component")
	if err != nil {
		return nil, err
	}
	if root == nil || root.Kind != yaml.MappingNode {
		return nil, Errors{{Message: "the pipeline component file must be a YAML mapping with type: pipeline and jobs:"}}
	}
	return pipelineComponentFromNode(root, "")
}

// pipelineComponentFromNode decodes a pipeline component found at f.
func pipelineComponentFromNode(n *yaml.Node, f string) (*PipelineJob, error) {
	sub, err := pipelineFromNode(without(n, "name", "version", "is_deterministic"))
	if err != nil {
		if es, ok := err.(Errors); ok {
			for i := range es {
				es[i].Field = join(f, es[i].Field)
			}
			addLines(es, n)
		}
		return nil, err
	}
	if len(sub.Jobs) == 0 {
		return nil, Errors{{Field: join(f, "jobs"), Line: n.Line, Message: "a pipeline component needs jobs: its steps"}}
	}
	sub.matchStepNames()
	return sub, nil
}

// isPipelineNode says whether an inline component is a pipeline
// component: type: pipeline, or steps under jobs:.
func isPipelineNode(n *yaml.Node) bool {
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	if t := child(n, "type"); t != nil && t.Kind == yaml.ScalarNode {
		return t.Value == "pipeline"
	}
	return child(n, "jobs") != nil
}

// ExpandPipelineSteps replaces every step that runs a resolved pipeline
// component (Subpipeline) by that component's steps, again until none is
// left, and rebinds what the other steps took from it. A step written
// type: pipeline whose component is not resolved is left for Validate,
// which says so.
func (p *PipelineJob) ExpandPipelineSteps() error {
	if p.Root != nil && p.Root.Subpipeline != nil && len(p.Jobs) == 0 {
		if err := p.expandRoot(); err != nil {
			return err
		}
	}
	for depth := 0; ; depth++ {
		names := slices.Sorted(maps.Keys(p.Jobs))
		var todo []string
		for _, n := range names {
			if st := p.Jobs[n]; st != nil && st.Subpipeline != nil {
				todo = append(todo, n)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		if depth >= maxPipelineDepth {
			return Errors{{Field: "jobs." + todo[0], Message: "pipeline components nest more than 10 deep; is one a step of itself?"}}
		}
		var es Errors
		for _, n := range todo {
			if err := p.expandStep(n); err != nil {
				es = append(es, err.(Errors)...)
			}
		}
		if len(es) > 0 {
			return es
		}
	}
}

// rootStep names, while it is expanded, the step that a pipeline job
// whose component is its whole pipeline (Root) stands for; its inner
// steps keep their names.
const rootStep = ""

// expandRoot makes a pipeline job whose component is a pipeline component
// the component's steps: the job's inputs and outputs are the
// component's.
func (p *PipelineJob) expandRoot() error {
	st, sub := *p.Root, p.Root.Subpipeline
	st.Inputs, st.Outputs = map[string]StepInput{}, map[string]StepOutput{}
	for k := range p.Inputs {
		st.Inputs[k] = StepInput{Binding: &Binding{Kind: BindParentInput, Name: k}}
	}
	for k := range p.Outputs {
		st.Outputs[k] = StepOutput{Binding: &Binding{Kind: BindParentOutput, Name: k}}
	}
	// The component's settings are the job's, where the job has none.
	if p.Settings == nil {
		p.Settings = sub.Settings
	}
	p.Jobs = map[string]*PipelineStep{rootStep: &st}
	p.Root = nil
	return p.expandStep(rootStep)
}

// expandStep replaces step name by its pipeline component's steps.
func (p *PipelineJob) expandStep(name string) error {
	st, sub := p.Jobs[name], p.Jobs[name].Subpipeline
	f := "jobs." + name
	if name == rootStep {
		f = ""
	}
	var es Errors
	for _, k := range slices.Sorted(maps.Keys(st.Inputs)) {
		if _, ok := sub.Inputs[k]; !ok {
			es.add(join(f, "inputs."+k), "the pipeline component has no input %q; %s", k, declared("inputs", sub.Inputs))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Outputs)) {
		if _, ok := sub.Outputs[k]; !ok {
			es.add(join(f, "outputs."+k), "the pipeline component has no output %q; %s", k, declared("outputs", sub.Outputs))
		}
	}
	compute := st.Compute
	if c := sub.DefaultCompute(); c != "" {
		compute = c
	}
	rename := func(inner string) string {
		if name == rootStep {
			return inner
		}
		return name + PipelineStepSeparator + inner
	}
	inner := map[string]*PipelineStep{}
	// produced[OUT] is the inner step output bound to the component's output OUT.
	produced := map[string]Binding{}
	for _, sn := range slices.Sorted(maps.Keys(sub.Jobs)) {
		s, nn := sub.Jobs[sn], rename(sn)
		if s == nil {
			es.add(join(f, "component.jobs."+sn), "the step is empty; give it a component or a command")
			continue
		}
		if _, taken := p.Jobs[nn]; taken {
			es.add(f, "expanding its pipeline component makes step %s, but the pipeline has a step of that name; rename one of them", nn)
			continue
		}
		c := *s
		if c.Compute == "" {
			c.Compute = compute
		}
		cc, err := computeFromInput(c.Compute, func(in string) (StepInput, bool) {
			if given, ok := st.Inputs[in]; ok {
				return given, true
			}
			decl, ok := sub.Inputs[in]
			return StepInput{Value: decl.Value, Path: decl.Path}, ok
		})
		if err != nil {
			es.add(join(f, "component.jobs."+sn)+".compute", "%v", err)
			continue
		}
		if c.Compute = cc; IsBinding(cc) {
			// The outer pipeline's input, which has a value by now.
			if c.Compute, err = computeFromInput(cc, func(in string) (StepInput, bool) {
				pi, ok := p.Inputs[in]
				return StepInput{Value: pi.Value, Path: pi.Path}, ok
			}); err != nil {
				es.add(join(f, "component.jobs."+sn)+".compute", "%v", err)
				continue
			}
		}
		c.Inputs = map[string]StepInput{}
		for _, k := range slices.Sorted(maps.Keys(s.Inputs)) {
			in := s.Inputs[k]
			switch {
			case in.Binding != nil && in.Binding.Kind == BindParentInput:
				given, ok := st.Inputs[in.Binding.Name]
				if !ok {
					decl, declaredOK := sub.Inputs[in.Binding.Name]
					switch {
					case !declaredOK:
						es.add(join(f, "component.jobs."+sn)+".inputs."+k, "%s: the pipeline component has no input %q; %s", in.Binding, in.Binding.Name, declared("inputs", sub.Inputs))
						continue
					case decl.Value != nil:
						v := *decl.Value
						given = StepInput{Value: &v}
					case decl.Path != "":
						given = StepInput{Type: decl.Type, Path: decl.Path, Mode: decl.Mode}
					default:
						continue // not given, no default: the inner step goes without it
					}
				}
				if given.Mode == "" {
					given.Mode = in.Mode
				}
				if given.Type == "" && given.Value == nil {
					given.Type = in.Type
				}
				c.Inputs[k] = given
			case in.Binding != nil && in.Binding.Kind == BindStepOutput:
				b := *in.Binding
				b.Step = rename(b.Step)
				in.Binding = &b
				c.Inputs[k] = in
			case in.Value != nil:
				// A literal holding the component's inputs ("run_${{parent.inputs.tag}}")
				// holds what the step gives them: a value, or the outer
				// pipeline's input it is bound to.
				v := ExpandParentInputs(*in.Value, func(n string) (string, bool) {
					given, ok := st.Inputs[n]
					switch {
					case ok && given.Value != nil:
						return *given.Value, true
					case ok && given.Binding != nil && given.Binding.Kind == BindParentInput:
						return given.Binding.String(), true
					case !ok && sub.Inputs[n].Value != nil:
						return *sub.Inputs[n].Value, true
					}
					return "", false
				})
				in.Value = &v
				c.Inputs[k] = in
			default:
				c.Inputs[k] = in
			}
		}
		c.Outputs = map[string]StepOutput{}
		for _, k := range slices.Sorted(maps.Keys(s.Outputs)) {
			out := s.Outputs[k]
			if out.Binding != nil && out.Binding.Kind == BindParentOutput {
				o := out.Binding.Name
				if _, ok := sub.Outputs[o]; !ok {
					es.add(join(f, "component.jobs."+sn)+".outputs."+k, "%s: the pipeline component has no output %q; %s", out.Binding, o, declared("outputs", sub.Outputs))
					continue
				}
				produced[o] = Binding{Kind: BindStepOutput, Step: nn, Name: k}
				// What the outer step makes of the component's output
				// is what this inner output becomes.
				decl := sub.Outputs[o]
				outer := st.Outputs[o]
				out = StepOutput{Binding: outer.Binding, Type: cmp.Or(outer.Type, decl.Type, out.Type), Mode: cmp.Or(outer.Mode, decl.Mode, out.Mode),
					Name: cmp.Or(outer.Name, decl.Name), Version: cmp.Or(outer.Version, decl.Version)}
			}
			c.Outputs[k] = out
		}
		inner[nn] = &c
	}
	if len(es) > 0 {
		return es
	}
	delete(p.Jobs, name)
	maps.Copy(p.Jobs, inner)
	// Steps that took the component's outputs take the inner steps' now.
	for _, on := range slices.Sorted(maps.Keys(p.Jobs)) {
		o := p.Jobs[on]
		if o == nil {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(o.Inputs)) {
			in := o.Inputs[k]
			if in.Binding == nil || in.Binding.Kind != BindStepOutput || in.Binding.Step != name {
				continue
			}
			b, ok := produced[in.Binding.Name]
			if !ok {
				es.add("jobs."+on+".inputs."+k, "%s: no step of the pipeline component of step %s gives its output %q (bind one with ${{parent.outputs.%s}})", in.Binding, name, in.Binding.Name, in.Binding.Name)
				continue
			}
			in.Binding = &b
			o.Inputs[k] = in
		}
	}
	return es.err()
}

// validatePipelineComponentStep checks a step that runs a pipeline
// component, in a file just parsed: it names the component, and what it
// binds is there. The component's own steps are checked once expanded.
func (p *PipelineJob) validatePipelineComponentStep(es *Errors, name string) {
	st, f := p.Jobs[name], "jobs."+name
	if !stepNameRe().MatchString(name) {
		es.add(f, "%s is not a valid step name: use letters, digits, '_' and '-', starting with a letter or '_'", quote(name))
	}
	switch {
	case st.Subpipeline != nil:
	case st.Component == nil || strings.TrimSpace(st.Component.Ref) == "":
		es.add(f+".component", "is required: the pipeline component's file (component: ./train_pipeline.yml) or the component written inline")
		return
	case st.Component.IsRegistered():
		es.add(f+".component", "%s: Ferry registers no pipeline components; name the pipeline component's file (component: ./train_pipeline.yml)", st.Component.Ref)
		return
	}
	if strings.TrimSpace(st.Command) != "" {
		es.add(f+".command", "a pipeline step runs its component's steps; it has no command of its own")
	}
	checkComputeRef(es, f+".compute", st.Compute)
	for _, k := range slices.Sorted(maps.Keys(st.Inputs)) {
		in, fi := st.Inputs[k], f+".inputs."+k
		if in.Binding == nil {
			continue
		}
		switch b := in.Binding; b.Kind {
		case BindParentInput:
			if _, ok := p.Inputs[b.Name]; !ok {
				es.add(fi, "%s: the pipeline has no input %q; %s", b, b.Name, declared("inputs", p.Inputs))
			}
		case BindStepOutput:
			if _, ok := p.Jobs[b.Step]; !ok || b.Step == name {
				es.add(fi, "%s: the pipeline has no other step %q; %s", b, b.Step, declared("jobs", p.Jobs))
			}
		default:
			es.add(fi, "%s names a pipeline output; an input takes ${{parent.inputs.NAME}} or ${{parent.jobs.STEP.outputs.NAME}}", b)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Outputs)) {
		out, fo := st.Outputs[k], f+".outputs."+k
		if out.Binding == nil {
			continue
		}
		if out.Binding.Kind != BindParentOutput {
			es.add(fo, "%s: an output binds to a pipeline output, ${{parent.outputs.NAME}}", out.Binding)
		} else if _, ok := p.Outputs[out.Binding.Name]; !ok {
			es.add(fo, "%s: the pipeline has no output %q; %s", out.Binding, out.Binding.Name, declared("outputs", p.Outputs))
		}
	}
}

// resolveComputeInputs replaces a step's compute written as a binding to
// a pipeline input (compute: ${{parent.inputs.NAME}}, Azure's way of
// making the target a parameter of the pipeline) by that input's value.
// A step that runs a pipeline component keeps its binding: it is resolved
// for the component's steps when the step is expanded.
func (p *PipelineJob) resolveComputeInputs() error {
	var es Errors
	for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
		st := p.Jobs[n]
		if st == nil {
			continue
		}
		c, err := computeFromInput(st.Compute, func(name string) (StepInput, bool) {
			in, ok := p.Inputs[name]
			if !ok {
				return StepInput{}, false
			}
			return StepInput{Value: in.Value, Type: in.Type, Path: in.Path}, true
		})
		if err != nil {
			es.add("jobs."+n+".compute", "%v", err)
			continue
		}
		st.Compute = c
	}
	return es.err()
}

// computeFromInput is compute, or when it is ${{parent.inputs.NAME}}, the
// literal value that input has (lookup finds it).
func computeFromInput(compute string, lookup func(string) (StepInput, bool)) (string, error) {
	b, ok, err := ParseBinding(strings.TrimSpace(compute))
	switch {
	case err != nil:
		return "", err
	case !ok:
		return compute, nil
	case b.Kind != BindParentInput:
		return "", fmt.Errorf("%s: a step's compute is a target's name or ${{parent.inputs.NAME}}, an input whose value is one", b)
	}
	in, ok := lookup(b.Name)
	switch {
	case !ok:
		return "", fmt.Errorf("%s: there is no input %q to take the compute target from", b, b.Name)
	case in.Binding != nil && in.Binding.Kind == BindParentInput:
		return in.Binding.String(), nil // the outer pipeline's input: resolved there
	case in.Value == nil:
		return "", fmt.Errorf("%s: input %s is data, not the name of a compute target; give it a value such as cpu-cluster", b, b.Name)
	}
	return strings.TrimSpace(*in.Value), nil
}

// matchStepNames rebinds a step input bound to a step the pipeline does
// not have, ${{parent.jobs.train-model.outputs.X}}, to the one step whose
// name is the same with '-' and '_' swapped (train_model): Azure's files
// write both for one step, and Azure runs them.
func (p *PipelineJob) matchStepNames() {
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	byNorm := map[string][]string{}
	for n := range p.Jobs {
		byNorm[norm(n)] = append(byNorm[norm(n)], n)
	}
	for _, st := range p.Jobs {
		if st == nil {
			continue
		}
		for k, in := range st.Inputs {
			if in.Binding == nil || in.Binding.Kind != BindStepOutput {
				continue
			}
			if _, ok := p.Jobs[in.Binding.Step]; ok {
				continue
			}
			if same := byNorm[norm(in.Binding.Step)]; len(same) == 1 {
				b := *in.Binding
				b.Step = same[0]
				in.Binding = &b
				st.Inputs[k] = in
			}
		}
		if st.Subpipeline != nil {
			st.Subpipeline.matchStepNames()
		}
	}
}
