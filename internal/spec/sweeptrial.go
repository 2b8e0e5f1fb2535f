package spec

import (
	"maps"
	"slices"
	"strings"
)

// IsComponentTrial says whether a sweep's trial names a command component
// (trial: ./component.yml or trial: azureml:NAME:VERSION) instead of
// being written inline.
func (j *Job) IsComponentTrial() bool {
	return j.Type == "sweep" && j.Trial != nil && j.Trial.Ref != ""
}

// UseComponentTrial makes a sweep's trial from the command component c
// that its trial names, as Azure ML binds one: the component's command,
// code, environment, environment variables, resources and distribution
// become the trial's, and the sweep's inputs are the component's. A sweep
// input whose value is ${{search_space.NAME}} (inputs: {lr:
// ${{search_space.lr}}}) puts that parameter where the command uses the
// input; a component input the sweep does not give takes the parameter
// of its name, as Azure binds a pipeline's sweep step, else its default,
// and an optional one without any is left out with its $[[...]]
// fragments. The code and environment snapshots, when c has
// them (a registered component), are the caller's to use.
func (j *Job) UseComponentTrial(c *Component) error {
	var es Errors
	params := map[string]string{} // input -> ${{search_space.NAME}}
	inputs := map[string]Input{}
	for _, k := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[k]
		if _, ok := c.Inputs[k]; !ok {
			es.add("inputs."+k, "the trial's component declares no input %s; %s", k, declared("inputs", c.Inputs))
			continue
		}
		if in.IsLiteral() {
			if m := exprRe().FindStringSubmatch(strings.TrimSpace(*in.Value)); m != nil && searchExprRe().MatchString(strings.TrimSpace(m[1])) {
				params[k] = "${{search_space." + searchExprRe().FindStringSubmatch(strings.TrimSpace(m[1]))[1] + "}}"
				continue
			}
		}
		inputs[k] = in
	}
	for _, k := range slices.Sorted(maps.Keys(c.Inputs)) {
		if _, given := j.Inputs[k]; given {
			continue
		}
		if _, ok := j.SearchSpace[k]; ok {
			// Azure binds a parameter to the input of its name.
			params[k] = "${{search_space." + k + "}}"
		} else if ci := c.Inputs[k]; ci.Default != nil {
			v := *ci.Default
			inputs[k] = Input{Value: &v}
		}
	}
	if err := es.err(); err != nil {
		return err
	}
	command := ExpandOptional(c.Command, func(k string) bool {
		_, ok := inputs[k]
		_, bound := params[k]
		return ok || bound
	})
	command = exprRe().ReplaceAllStringFunc(command, func(m string) string {
		ref := refExprRe().FindStringSubmatch(strings.TrimSpace(exprRe().FindStringSubmatch(m)[1]))
		if ref != nil && ref[1] == "inputs" {
			if p, ok := params[ref[2]]; ok {
				return p
			}
		}
		return m
	})
	outputs := maps.Clone(j.Outputs)
	for k, o := range c.Outputs {
		if _, ok := outputs[k]; !ok {
			if outputs == nil {
				outputs = map[string]Output{}
			}
			outputs[k] = Output{Type: o.Type}
		}
	}
	if len(inputs) == 0 {
		inputs = nil
	}
	j.Inputs, j.Outputs = inputs, outputs
	j.Trial = &Trial{
		Type: "command", Code: c.Code, Command: command, Environment: c.Environment,
		EnvironmentVariables: maps.Clone(c.EnvironmentVariables), Resources: c.Resources, Distribution: c.Distribution,
	}
	return nil
}
