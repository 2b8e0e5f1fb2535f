package spec

import (
	"fmt"
	"strings"
)

// Binding is a pipeline step's reference to a value of its pipeline, as
// Azure ML writes it: ${{parent.inputs.NAME}} (a pipeline input),
// ${{parent.jobs.STEP.outputs.NAME}} (another step's output) or
// ${{parent.outputs.NAME}} (a pipeline output, on a step's output).
type Binding struct {
	// Kind is BindParentInput, BindStepOutput or BindParentOutput.
	Kind string `json:"kind"`
	// Step is the step whose output is meant (BindStepOutput only).
	Step string `json:"step,omitempty"`
	Name string `json:"name"`
}

// The kinds of Binding.
const (
	BindParentInput  = "parent.inputs"
	BindStepOutput   = "parent.jobs.outputs"
	BindParentOutput = "parent.outputs"
)

// String writes the binding as a pipeline file does.
func (b Binding) String() string {
	switch b.Kind {
	case BindStepOutput:
		return "${{parent.jobs." + b.Step + ".outputs." + b.Name + "}}"
	case BindParentOutput:
		return "${{parent.outputs." + b.Name + "}}"
	}
	return "${{parent.inputs." + b.Name + "}}"
}

var stepNameRe = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_-]{0,200}$`)

// IsBinding says whether s is written as one ${{...}} expression, which
// ParseBinding then reads (or says what is wrong with).
func IsBinding(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "${{") && strings.HasSuffix(s, "}}")
}

// ParseBinding reads a value that is one ${{parent...}} expression,
// spaces inside the braces allowed. ok is false when s is not written as
// an expression at all (a literal value); err says what is wrong with an
// expression that is not a binding Ferry knows.
func ParseBinding(s string) (b Binding, ok bool, err error) {
	if !IsBinding(s) {
		return Binding{}, false, nil
	}
	t := strings.TrimSpace(s)
	inner := strings.TrimSpace(t[3 : len(t)-2])
	bad := func() (Binding, bool, error) {
		return Binding{}, true, fmt.Errorf("%s is not a binding Ferry knows: write ${{parent.inputs.NAME}}, ${{parent.jobs.STEP.outputs.NAME}} or ${{parent.outputs.NAME}}", quote(t))
	}
	if strings.Contains(inner, "{{") || strings.Contains(inner, "}}") {
		// Several expressions in one value: a literal, whose
		// ${{parent.inputs.NAME}} are replaced by their values.
		return Binding{}, false, nil
	}
	parts := strings.Split(inner, ".")
	for i, p := range parts {
		// A step's name may hold '-' (Azure's examples name steps
		// prep-job); other names are identifiers.
		if !identRe().MatchString(p) && !(i > 0 && parts[i-1] == "jobs" && stepNameRe().MatchString(p)) {
			return bad()
		}
	}
	if len(parts) > 0 && parts[0] != "parent" {
		// The older form Azure's first pipeline files wrote, without
		// parent.: ${{inputs.X}}, ${{jobs.STEP.outputs.Y}}, ${{outputs.Z}}.
		parts = append([]string{"parent"}, parts...)
	}
	switch {
	case len(parts) == 3 && parts[0] == "parent" && parts[1] == "inputs":
		return Binding{Kind: BindParentInput, Name: parts[2]}, true, nil
	case len(parts) == 3 && parts[0] == "parent" && parts[1] == "outputs":
		return Binding{Kind: BindParentOutput, Name: parts[2]}, true, nil
	case len(parts) == 5 && parts[0] == "parent" && parts[1] == "jobs" && parts[3] == "outputs":
		return Binding{Kind: BindStepOutput, Step: parts[2], Name: parts[4]}, true, nil
	}
	return bad()
}

// ExpandOptional resolves a component command's optional fragments,
// $[[...]]: a fragment whose ${{inputs.NAME}} all name inputs that have a
// value (has says which) is kept without its brackets, any other is
// dropped. A $[[ without its ]] is kept as written.
func ExpandOptional(command string, has func(input string) bool) string {
	var b strings.Builder
	rest := command
	for {
		i := strings.Index(rest, "$[[")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		j := strings.Index(rest[i+3:], "]]")
		if j < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i])
		frag := rest[i+3 : i+3+j]
		keep := true
		for _, m := range exprRe().FindAllStringSubmatch(frag, -1) {
			ref := refExprRe().FindStringSubmatch(strings.TrimSpace(m[1]))
			if ref != nil && ref[1] == "inputs" && !has(ref[2]) {
				keep = false
			}
		}
		if keep {
			b.WriteString(frag)
		}
		rest = rest[i+3+j+2:]
	}
}

// commandRefs lists the ${{inputs.X}} and ${{outputs.Y}} a command uses,
// and says for each input whether it is only inside $[[...]] fragments;
// bad lists expressions that are neither.
func commandRefs(command string) (inputs map[string]bool, outputs map[string]bool, bad []string) {
	inputs, outputs = map[string]bool{}, map[string]bool{}
	note := func(text string, optional bool) {
		for _, m := range exprRe().FindAllStringSubmatch(text, -1) {
			ref := refExprRe().FindStringSubmatch(strings.TrimSpace(m[1]))
			switch {
			case ref == nil:
				bad = append(bad, m[0])
			case ref[1] == "inputs":
				if prev, seen := inputs[ref[2]]; !seen || prev {
					inputs[ref[2]] = optional
				}
			default:
				outputs[ref[2]] = true
			}
		}
	}
	rest := command
	for {
		i := strings.Index(rest, "$[[")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i+3:], "]]")
		if j < 0 {
			break
		}
		note(rest[:i], false)
		note(rest[i+3:i+3+j], true)
		rest = rest[i+3+j+2:]
	}
	note(rest, false)
	return inputs, outputs, bad
}

// ExpandParentInputs replaces the ${{parent.inputs.NAME}} written inside
// a longer literal (a step input "run_${{parent.inputs.tag}}") with the
// value value gives for NAME; expressions it gives none for stay as
// written.
func ExpandParentInputs(s string, value func(name string) (string, bool)) string {
	return exprRe().ReplaceAllStringFunc(s, func(m string) string {
		b, ok, err := ParseBinding(m)
		if !ok || err != nil || b.Kind != BindParentInput {
			return m
		}
		if v, ok := value(b.Name); ok {
			return v
		}
		return m
	})
}
