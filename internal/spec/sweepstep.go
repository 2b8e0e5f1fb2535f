package spec

import (
	"maps"
	"strings"
)

// validateSweepStep checks a sweep step's own fields (search_space,
// objective, sampling_algorithm, early_termination, limits) as a sweep
// job's, naming them under the step. Its trial is checked as the step's
// component.
func (p *PipelineJob) validateSweepStep(es *Errors, name string) {
	st, f := p.Jobs[name], "jobs."+name+"."
	// A trial given by reference is not checked by validateSweep: the
	// step's component is checked on its own.
	sw := &Job{Type: "sweep", Trial: &Trial{Ref: "./trial"}, SearchSpace: st.SearchSpace, Objective: st.Objective,
		SamplingAlgorithm: st.SamplingAlgorithm, EarlyTermination: st.EarlyTermination, Limits: st.Limits}
	if err := sw.validateSweep(); err != nil {
		for _, fe := range err.(Errors) {
			*es = append(*es, &FieldError{Field: f + fe.Field, Message: fe.Message})
		}
	}
}

// refuseSweepStepFields reports the sweep fields a command step has.
func (p *PipelineJob) refuseSweepStepFields(es *Errors, name string) {
	st, f := p.Jobs[name], "jobs."+name+"."
	for _, x := range []struct {
		name string
		set  bool
	}{
		{"search_space", st.SearchSpace != nil}, {"objective", st.Objective != nil},
		{"sampling_algorithm", st.SamplingAlgorithm != nil}, {"early_termination", st.EarlyTermination != nil},
	} {
		if x.set {
			es.add(f+x.name, "applies only to sweep steps; add type: sweep and name the trial's component with trial:, or remove it")
		}
	}
}

// SweepStepJob is the sweep job that sweep step n runs. base is the
// command job the step would be (its name, tags, compute, bound inputs,
// outputs, environment variables, resources); comp is its trial's
// component. The trial is bound as a sweep job's component trial: a
// step input ${{search_space.NAME}}, or a component input the step does
// not give that a parameter is named after, takes the parameter. The
// sweep's outputs are its best trial's.
func (p *PipelineJob) SweepStepJob(n string, base *Job, comp *Component) (*Job, error) {
	st := p.Jobs[n]
	inputs := map[string]Input{}
	for k, in := range base.Inputs {
		_, given := st.Inputs[k]
		if _, swept := st.SearchSpace[k]; swept && !given {
			continue // the component's default: the parameter wins
		}
		inputs[k] = in
	}
	sw := &Job{Type: "sweep", Name: base.Name, DisplayName: base.DisplayName, ExperimentName: base.ExperimentName,
		Description: base.Description, Tags: maps.Clone(base.Tags), Compute: base.Compute, Inputs: inputs,
		Outputs: maps.Clone(base.Outputs), SearchSpace: st.SearchSpace, Objective: st.Objective,
		SamplingAlgorithm: st.SamplingAlgorithm, EarlyTermination: st.EarlyTermination, Limits: st.Limits}
	if sw.Objective != nil {
		o := *sw.Objective
		o.Goal = strings.ToLower(o.Goal)
		sw.Objective = &o
	}
	if err := sw.UseComponentTrial(comp); err != nil {
		return nil, err
	}
	sw.Trial.EnvironmentVariables = maps.Clone(base.EnvironmentVariables)
	sw.Trial.Resources, sw.Trial.Distribution = base.Resources, base.Distribution
	if len(sw.Inputs) == 0 {
		sw.Inputs = nil
	}
	return sw, sw.Validate()
}
