package spec

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds of a sweep job.
const (
	// MaxSweepTrials bounds limits.max_total_trials and
	// max_concurrent_trials, as Azure ML does; it is also a sweep's
	// default number of trials, as in Azure ML.
	MaxSweepTrials = 1000
	// MaxSearchParams bounds the parameters of a search space.
	MaxSearchParams = 100
	// MaxChoiceValues bounds the values of one choice parameter.
	MaxChoiceValues = 10000
	// maxSweepName leaves room for a trial's suffix (_999) within the
	// 255 characters of a job name.
	maxSweepName = 240
	// maxExp bounds the exponent of loguniform and lognormal, whose
	// values exp(x) would otherwise overflow a float64.
	maxExp = 700
	// maxParamNumber and minQ keep every value a sweep can draw finite.
	maxParamNumber = 1e15
	minQ           = 1e-12
)

// Trial is a sweep job's trial: the command job each trial runs, whose
// command may use ${{search_space.NAME}} as well as ${{inputs.NAME}} and
// ${{outputs.NAME}}. Ref holds the short form, `trial: ./component.yml`.
type Trial struct {
	Ref                  string            `yaml:"ref,omitempty" json:"ref,omitempty"`
	Type                 string            `yaml:"type,omitempty" json:"type,omitempty"` // command
	Code                 string            `yaml:"code,omitempty" json:"code,omitempty"`
	Command              string            `yaml:"command,omitempty" json:"command,omitempty"`
	Environment          *Environment      `yaml:"environment,omitempty" json:"environment,omitempty"`
	EnvironmentVariables map[string]string `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	Distribution         *Distribution     `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	Resources            *Resources        `yaml:"resources,omitempty" json:"resources,omitempty"`
}

// SearchParam is one parameter of a sweep's search space. Which fields
// apply depends on Type, as in Azure ML: choice (values), randint
// (upper: 0 ≤ n < upper), uniform and quniform (min_value, max_value),
// loguniform and qloguniform (exp of a uniform value between min_value
// and max_value), normal and qnormal (mu, sigma), lognormal and
// qlognormal (exp of a normal value); the q forms round to a multiple of q.
type SearchParam struct {
	Type     string   `yaml:"type" json:"type"`
	Values   []any    `yaml:"values,omitempty" json:"values,omitempty"`
	Upper    *int64   `yaml:"upper,omitempty" json:"upper,omitempty"`
	MinValue *float64 `yaml:"min_value,omitempty" json:"min_value,omitempty"`
	MaxValue *float64 `yaml:"max_value,omitempty" json:"max_value,omitempty"`
	Mu       *float64 `yaml:"mu,omitempty" json:"mu,omitempty"`
	Sigma    *float64 `yaml:"sigma,omitempty" json:"sigma,omitempty"`
	Q        *float64 `yaml:"q,omitempty" json:"q,omitempty"`
}

// SamplingAlgorithm is how a sweep picks its trials' parameters: random
// (with Seed for a sweep that can be repeated; Rule random or sobol),
// grid (every combination of choice values) or bayesian. YAML may write it
// as the type alone: `sampling_algorithm: random`.
type SamplingAlgorithm struct {
	Type string `yaml:"type" json:"type"`
	Seed *int64 `yaml:"seed,omitempty" json:"seed,omitempty"`
	Rule string `yaml:"rule,omitempty" json:"rule,omitempty"`
	// Logbase is the log base Azure's Sobol rule uses for log-scaled
	// parameters (e or a number); kept, as Rule is.
	Logbase string `yaml:"logbase,omitempty" json:"logbase,omitempty"`
}

// Objective is the metric a sweep optimises.
type Objective struct {
	PrimaryMetric string `yaml:"primary_metric" json:"primary_metric"`
	Goal          string `yaml:"goal" json:"goal"` // maximize | minimize
}

// EarlyTermination is a policy that cancels trials doing badly, judged
// on the primary metric they log: each value logged is an interval.
type EarlyTermination struct {
	Type                 string   `yaml:"type" json:"type"` // bandit | median_stopping | truncation_selection
	EvaluationInterval   int      `yaml:"evaluation_interval,omitempty" json:"evaluation_interval,omitempty"`
	DelayEvaluation      int      `yaml:"delay_evaluation,omitempty" json:"delay_evaluation,omitempty"`
	SlackFactor          *float64 `yaml:"slack_factor,omitempty" json:"slack_factor,omitempty"`
	SlackAmount          *float64 `yaml:"slack_amount,omitempty" json:"slack_amount,omitempty"`
	TruncationPercentage int      `yaml:"truncation_percentage,omitempty" json:"truncation_percentage,omitempty"`
}

// The kinds of things a sweep names.
var (
	samplingTypes    = []string{"random", "grid", "bayesian"}
	samplingRules    = []string{"random", "sobol"}
	goals            = []string{"maximize", "minimize"}
	terminationTypes = []string{"bandit", "median_stopping", "truncation_selection"}
	paramTypes       = []string{"choice", "randint", "uniform", "loguniform", "normal", "lognormal", "quniform", "qloguniform", "qnormal", "qlognormal"}
	// bayesianTypes are the parameter types bayesian sampling takes, as
	// in Azure ML.
	bayesianTypes = []string{"choice", "uniform", "quniform", "loguniform", "qloguniform"}
	searchExprRe  = lazyRegexp(`^search_space\.([A-Za-z_][A-Za-z0-9_]*)$`)
)

// UnmarshalYAML reads a trial written as a file reference or a mapping.
func (t *Trial) UnmarshalYAML(n *yaml.Node) error {
	type plain Trial
	var p plain
	if err := refOrMappingYAML(n, &p, &p.Ref, "a trial must be a mapping with command, code and environment"); err != nil {
		return err
	}
	*t = Trial(p)
	return nil
}

// UnmarshalJSON reads a trial as an object or a plain string reference.
func (t *Trial) UnmarshalJSON(data []byte) error {
	type plain Trial
	var p plain
	if err := refOrObjectJSON(data, &p, &p.Ref, "a trial"); err != nil {
		return err
	}
	*t = Trial(p)
	return nil
}

// UnmarshalYAML reads a sampling algorithm written as its type alone or
// as a mapping.
func (a *SamplingAlgorithm) UnmarshalYAML(n *yaml.Node) error {
	type plain SamplingAlgorithm
	var p plain
	if err := refOrMappingYAML(n, &p, &p.Type, "sampling_algorithm must be random, grid or bayesian, or a mapping with type and seed"); err != nil {
		return err
	}
	*a = SamplingAlgorithm(p)
	return nil
}

// UnmarshalJSON reads a sampling algorithm as an object or a plain string.
func (a *SamplingAlgorithm) UnmarshalJSON(data []byte) error {
	type plain SamplingAlgorithm
	var p plain
	if err := refOrObjectJSON(data, &p, &p.Type, "sampling_algorithm"); err != nil {
		return err
	}
	*a = SamplingAlgorithm(p)
	return nil
}

// Sampling returns the sweep's sampling algorithm, random when it names
// none.
func (j *Job) Sampling() SamplingAlgorithm {
	if j.SamplingAlgorithm == nil || j.SamplingAlgorithm.Type == "" {
		return SamplingAlgorithm{Type: "random"}
	}
	return *j.SamplingAlgorithm
}

// SeedPicked says whether the server picks sweep j's seed at its submit:
// no seed is given and the sampling draws (random, sobol, bayesian; grid
// draws nothing). Its trials then differ from one run of it to the next.
func (j *Job) SeedPicked() bool {
	alg := j.Sampling()
	return j.Type == "sweep" && alg.Type != "grid" && alg.Seed == nil
}

// TrialLimits returns how many trials a sweep runs in all and at once:
// limits.max_total_trials (grid: at most the number of combinations;
// default MaxSweepTrials, or every combination for grid) and
// limits.max_concurrent_trials (default: all of them).
func (j *Job) TrialLimits() (total, concurrent int) {
	if j.Limits != nil {
		total, concurrent = j.Limits.MaxTotalTrials, j.Limits.MaxConcurrentTrials
	}
	if j.Sampling().Type == "grid" {
		if n := GridSize(j.SearchSpace); total == 0 || n < total {
			total = n
		}
	}
	if total == 0 {
		total = MaxSweepTrials
	}
	if concurrent == 0 || concurrent > total {
		concurrent = total
	}
	return total, concurrent
}

// GridSize is the number of combinations of a search space's choice
// values, capped at MaxSweepTrials+1 (more than any sweep runs).
func GridSize(space map[string]SearchParam) int {
	n := 1
	for _, p := range space {
		n *= max(len(p.Values), 1)
		if n > MaxSweepTrials {
			return MaxSweepTrials + 1
		}
	}
	return n
}

// TrialJob is the command job that trial runs with params (a value for
// each parameter of the search space, as SearchSpace's sampler gives
// them): the trial's command with ${{search_space.NAME}} replaced by the
// value, and the sweep's inputs, outputs, compute, experiment, tags and
// queue settings. limits.trial_timeout becomes its limits.timeout.
func (j *Job) TrialJob(params map[string]any) *Job {
	t := j.Trial
	if t == nil {
		t = &Trial{}
	}
	c := &Job{
		Type: "command", ExperimentName: j.ExperimentName, Description: j.Description,
		Tags: maps.Clone(j.Tags), Properties: maps.Clone(j.Properties),
		Code: t.Code, Command: SubstituteSearchSpace(t.Command, params), Environment: t.Environment,
		EnvironmentVariables: t.EnvironmentVariables, Compute: j.Compute,
		Inputs: j.Inputs, Outputs: j.Outputs, Resources: t.Resources, Distribution: t.Distribution,
		QueueSettings: j.QueueSettings, Identity: j.Identity,
	}
	if c.Resources == nil {
		c.Resources = j.Resources
	}
	if j.Limits != nil && j.Limits.TrialTimeout > 0 {
		c.Limits = &Limits{Timeout: j.Limits.TrialTimeout}
	}
	c = c.Clone()
	for k, o := range c.Outputs {
		// The sweep registers its best trial's output, not each trial.
		o.Name, o.Version = "", ""
		c.Outputs[k] = o
	}
	return c
}

// SubstituteSearchSpace replaces each ${{search_space.NAME}} in command by
// the value of NAME in params as FormatParam writes it; other expressions
// stay.
func SubstituteSearchSpace(command string, params map[string]any) string {
	return exprRe().ReplaceAllStringFunc(command, func(m string) string {
		expr := strings.TrimSpace(exprRe().FindStringSubmatch(m)[1])
		ref := searchExprRe().FindStringSubmatch(expr)
		if ref == nil {
			return m
		}
		v, ok := params[ref[1]]
		if !ok {
			return m
		}
		return FormatParam(v)
	})
}

// FormatParam writes a parameter's value as a trial's command line gets
// it: a whole number without a fraction, other numbers in the shortest
// form that reads back the same, true and false as Python writes them.
func FormatParam(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// refuseSweepFields reports the sweep job fields a command job has.
func (j *Job) refuseSweepFields(es *Errors) {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"trial", j.Trial != nil}, {"search_space", j.SearchSpace != nil},
		{"sampling_algorithm", j.SamplingAlgorithm != nil}, {"objective", j.Objective != nil},
		{"early_termination", j.EarlyTermination != nil},
	} {
		if f.set {
			es.add(f.name, "applies only to sweep jobs; add type: sweep, or remove it")
		}
	}
	if l := j.Limits; l != nil {
		if l.MaxTotalTrials != 0 {
			es.add("limits.max_total_trials", "applies only to sweep jobs (type: sweep)")
		}
		if l.MaxConcurrentTrials != 0 {
			es.add("limits.max_concurrent_trials", "applies only to sweep jobs (type: sweep)")
		}
		if l.TrialTimeout != 0 {
			es.add("limits.trial_timeout", "applies only to sweep jobs (type: sweep); a command job's limit is limits.timeout")
		}
	}
}

// validateSweep checks a sweep job and returns all its problems.
func (j *Job) validateSweep() error {
	var es Errors
	if j.Name != "" && (!jobNameRe().MatchString(j.Name) || len(j.Name) > maxSweepName) {
		es.add("name", "%s is not a valid sweep job name: use 1 to %d letters, digits, '_' or '-', starting with a letter or digit (its trials are named NAME_0, NAME_1, ...)", quote(j.Name), maxSweepName)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"command", j.Command != ""}, {"code", j.Code != ""}, {"environment", j.Environment != nil},
		{"environment_variables", j.EnvironmentVariables != nil}, {"distribution", j.Distribution != nil},
	} {
		if f.set {
			es.add(f.name, "a sweep job's %s goes under trial: (trial.%s)", f.name, f.name)
		}
	}
	if len(j.Services) > 0 {
		es.add("services", "a sweep job has no services; its trials are command jobs without them")
	}
	if j.Trial == nil {
		es.add("trial", "is required: the command job each trial runs, e.g. trial: {code: ./src, command: python train.py --lr ${{search_space.lr}}, environment: ...}")
	} else {
		j.validateTrial(&es)
	}
	j.validateSearchSpace(&es)
	alg := j.Sampling()
	if a := j.SamplingAlgorithm; a != nil {
		oneOf(&es, "sampling_algorithm.type", a.Type, true, samplingTypes)
		if a.Rule != "" {
			if a.Type != "random" && a.Type != "" {
				es.add("sampling_algorithm.rule", "applies only to random sampling")
			} else {
				oneOf(&es, "sampling_algorithm.rule", a.Rule, true, samplingRules)
			}
		}
		if a.Seed != nil && a.Type == "grid" {
			es.add("sampling_algorithm.seed", "grid sampling takes no seed: it runs every combination in order")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(j.SearchSpace)) {
		p, f := j.SearchSpace[name], "search_space."+name+".type"
		switch alg.Type {
		case "grid":
			if p.Type != "choice" && slices.Contains(paramTypes, p.Type) {
				es.add(f, "grid sampling takes only choice parameters, got %s; write type: choice with values, or use sampling_algorithm: random", p.Type)
			}
		case "bayesian":
			if !slices.Contains(bayesianTypes, p.Type) && slices.Contains(paramTypes, p.Type) {
				es.add(f, "bayesian sampling takes only %s parameters, got %s", joinOr(bayesianTypes), p.Type)
			}
		}
	}
	if j.Objective == nil {
		es.add("objective", "is required: the metric the trials log and whether to maximize or minimize it, e.g. objective: {primary_metric: accuracy, goal: maximize}")
	} else {
		o := j.Objective
		if strings.TrimSpace(o.PrimaryMetric) == "" || len(o.PrimaryMetric) > 255 {
			es.add("objective.primary_metric", "is required: the name (1 to 255 characters) of the metric the trials log, e.g. accuracy")
		}
		o.Goal = strings.ToLower(o.Goal)
		oneOf(&es, "objective.goal", o.Goal, false, goals)
	}
	if l := j.Limits; l != nil {
		if l.MaxTotalTrials < 0 || l.MaxTotalTrials > MaxSweepTrials {
			es.add("limits.max_total_trials", "must be from 1 to %d, got %d", MaxSweepTrials, l.MaxTotalTrials)
		}
		if l.MaxConcurrentTrials < 0 || l.MaxConcurrentTrials > MaxSweepTrials {
			es.add("limits.max_concurrent_trials", "must be from 1 to %d, got %d", MaxSweepTrials, l.MaxConcurrentTrials)
		}
		if l.Timeout < 0 || l.Timeout > MaxSeconds {
			es.add("limits.timeout", "must be a whole number of seconds from 0 (no limit) to %d (366 days), got %d", MaxSeconds, l.Timeout)
		}
		if l.TrialTimeout < 0 || l.TrialTimeout > MaxSeconds {
			es.add("limits.trial_timeout", "must be a whole number of seconds from 0 (no limit) to %d (366 days), got %d", MaxSeconds, l.TrialTimeout)
		}
	}
	if et := j.EarlyTermination; et != nil {
		validateTermination(&es, et)
		if alg.Type == "bayesian" {
			es.add("early_termination", "bayesian sampling takes no early termination policy (as in Azure ML): it learns from every trial's result; remove it or use random sampling")
		}
	}
	return es.err()
}

// validateTrial checks the trial as the command job it makes, naming the
// trial's fields as the file does.
func (j *Job) validateTrial(es *Errors) {
	t := j.Trial
	if t.Ref != "" {
		// A component's trial is checked once it is read (UseComponentTrial).
		if strings.HasPrefix(t.Ref, "azureml:") {
			if _, _, err := ParseComponentRef(t.Ref); err != nil {
				es.add("trial", "%v", err)
			}
		} else if strings.Contains(t.Ref, "://") {
			es.add("trial", "%s is neither a component file (./component.yml) nor a registered component (azureml:NAME:VERSION)", quote(t.Ref))
		}
		return
	}
	if t.Type != "" && t.Type != "command" {
		es.add("trial.type", "a trial is a command job: leave type out or write command, got %s", quote(t.Type))
	}
	for _, m := range exprRe().FindAllStringSubmatch(t.Command, -1) {
		ref := searchExprRe().FindStringSubmatch(strings.TrimSpace(m[1]))
		if ref == nil {
			continue
		}
		if _, ok := j.SearchSpace[ref[1]]; !ok {
			es.add("trial.command", "%s refers to parameter %q, which the search space does not declare; %s", m[0], ref[1], declared("search_space", j.SearchSpace))
		}
	}
	// Any value checks the rest: the parameters are substituted first.
	params := map[string]any{}
	for name := range j.SearchSpace {
		params[name] = "1"
	}
	for _, m := range exprRe().FindAllStringSubmatch(t.Command, -1) {
		if ref := searchExprRe().FindStringSubmatch(strings.TrimSpace(m[1])); ref != nil {
			params[ref[1]] = "1" // reported above when undeclared
		}
	}
	tj := j.TrialJob(params)
	err := tj.Validate()
	if err == nil {
		return
	}
	for _, e := range err.(Errors) {
		f := e.Field
		switch head, _, _ := strings.Cut(f, "."); head {
		case "command", "code", "environment", "environment_variables", "distribution":
			f = "trial." + f
		case "resources":
			if t.Resources != nil {
				f = "trial." + f
			}
		case "limits":
			f = "limits.trial_timeout"
		case "type":
			continue
		}
		*es = append(*es, &FieldError{Field: f, Message: e.Message})
	}
}

func (j *Job) validateSearchSpace(es *Errors) {
	if len(j.SearchSpace) == 0 {
		es.add("search_space", "is required: the parameters to sweep, e.g. search_space: {lr: {type: loguniform, min_value: -6, max_value: -1}}")
		return
	}
	if len(j.SearchSpace) > MaxSearchParams {
		es.add("search_space", "has %d parameters; at most %d", len(j.SearchSpace), MaxSearchParams)
	}
	for _, name := range slices.Sorted(maps.Keys(j.SearchSpace)) {
		f := "search_space." + name
		if !identRe().MatchString(name) {
			es.add(f, "%s is not a valid parameter name: use letters, digits and '_', not starting with a digit", quote(name))
		}
		validateParam(es, f, j.SearchSpace[name])
	}
}

// validateParam checks one parameter of a search space at field f.
func validateParam(es *Errors, f string, p SearchParam) {
	oneOf(es, f+".type", p.Type, false, paramTypes)
	set := map[string]bool{
		"values": p.Values != nil, "upper": p.Upper != nil, "min_value": p.MinValue != nil,
		"max_value": p.MaxValue != nil, "mu": p.Mu != nil, "sigma": p.Sigma != nil, "q": p.Q != nil,
	}
	var want []string
	switch p.Type {
	case "choice":
		want = []string{"values"}
	case "randint":
		want = []string{"upper"}
	case "uniform", "loguniform":
		want = []string{"min_value", "max_value"}
	case "quniform", "qloguniform":
		want = []string{"min_value", "max_value", "q"}
	case "normal", "lognormal":
		want = []string{"mu", "sigma"}
	case "qnormal", "qlognormal":
		want = []string{"mu", "sigma", "q"}
	default:
		return
	}
	for _, k := range []string{"values", "upper", "min_value", "max_value", "mu", "sigma", "q"} {
		switch {
		case set[k] && !slices.Contains(want, k):
			es.add(f+"."+k, "does not apply to a %s parameter, which takes %s", p.Type, joinNames(want))
		case !set[k] && slices.Contains(want, k):
			es.add(f+"."+k, "is required: a %s parameter takes %s", p.Type, joinNames(want))
		}
	}
	if p.Values != nil {
		switch {
		case len(p.Values) == 0:
			es.add(f+".values", "needs at least one value")
		case len(p.Values) > MaxChoiceValues:
			es.add(f+".values", "has %d values; at most %d", len(p.Values), MaxChoiceValues)
		}
		for i, v := range p.Values {
			switch v.(type) {
			case string, float64, bool, int, int64:
			case map[string]any:
				es.add(fmt.Sprintf("%s.values[%d]", f, i), "nested search spaces are not supported; give plain values (numbers, strings or booleans)")
			default:
				es.add(fmt.Sprintf("%s.values[%d]", f, i), "must be a number, a string or a boolean")
			}
		}
	}
	for k, v := range map[string]*float64{"min_value": p.MinValue, "max_value": p.MaxValue, "mu": p.Mu, "sigma": p.Sigma, "q": p.Q} {
		if v != nil && math.Abs(*v) > maxParamNumber {
			es.add(f+"."+k, "must be from -1e15 to 1e15, got %s", FormatParam(*v))
		}
	}
	if p.Q != nil && *p.Q > 0 && *p.Q < minQ {
		es.add(f+".q", "must be at least 1e-12, got %s", FormatParam(*p.Q))
	}
	if p.Upper != nil && (*p.Upper < 1 || *p.Upper > math.MaxInt32) {
		es.add(f+".upper", "must be from 1 to %d (values are 0 to upper-1), got %d", math.MaxInt32, *p.Upper)
	}
	if p.MinValue != nil && p.MaxValue != nil {
		lo, hi := *p.MinValue, *p.MaxValue
		if lo >= hi {
			es.add(f+".max_value", "must be greater than min_value (%s ≥ %s)", FormatParam(lo), FormatParam(hi))
		}
		if strings.Contains(p.Type, "log") && (hi > maxExp || lo < -maxExp) {
			es.add(f, "min_value and max_value of %s are exponents (values are exp(x)) and must be from -%d to %d", p.Type, maxExp, maxExp)
		}
	}
	if p.Sigma != nil && *p.Sigma <= 0 {
		es.add(f+".sigma", "must be greater than 0, got %s", FormatParam(*p.Sigma))
	}
	if p.Mu != nil && p.Sigma != nil && strings.Contains(p.Type, "log") && math.Abs(*p.Mu)+10**p.Sigma > maxExp {
		es.add(f, "mu and sigma of %s make exponents (values are exp(x)) beyond ±%d", p.Type, maxExp)
	}
	if p.Q != nil && *p.Q <= 0 {
		es.add(f+".q", "must be greater than 0, got %s", FormatParam(*p.Q))
	}
}

func validateTermination(es *Errors, et *EarlyTermination) {
	oneOf(es, "early_termination.type", et.Type, false, terminationTypes)
	if et.EvaluationInterval < 0 || et.EvaluationInterval > 1<<20 {
		es.add("early_termination.evaluation_interval", "must be from 1 to %d, got %d", 1<<20, et.EvaluationInterval)
	}
	if et.DelayEvaluation < 0 || et.DelayEvaluation > 1<<20 {
		es.add("early_termination.delay_evaluation", "must be from 0 to %d, got %d", 1<<20, et.DelayEvaluation)
	}
	if et.Type != "bandit" {
		if et.SlackFactor != nil {
			es.add("early_termination.slack_factor", "applies only to the bandit policy")
		}
		if et.SlackAmount != nil {
			es.add("early_termination.slack_amount", "applies only to the bandit policy")
		}
	}
	if et.Type != "truncation_selection" && et.TruncationPercentage != 0 {
		es.add("early_termination.truncation_percentage", "applies only to the truncation_selection policy")
	}
	switch et.Type {
	case "bandit":
		switch {
		case et.SlackFactor == nil && et.SlackAmount == nil:
			es.add("early_termination", "the bandit policy needs slack_factor (a ratio, e.g. 0.1) or slack_amount (an absolute distance) from the best trial")
		case et.SlackFactor != nil && et.SlackAmount != nil:
			es.add("early_termination.slack_amount", "give slack_factor or slack_amount, not both")
		case et.SlackFactor != nil && *et.SlackFactor < 0:
			es.add("early_termination.slack_factor", "must be 0 or more, got %s", FormatParam(*et.SlackFactor))
		case et.SlackAmount != nil && *et.SlackAmount < 0:
			es.add("early_termination.slack_amount", "must be 0 or more, got %s", FormatParam(*et.SlackAmount))
		}
	case "truncation_selection":
		if et.TruncationPercentage < 1 || et.TruncationPercentage > 99 {
			es.add("early_termination.truncation_percentage", "is required: the percentage (1 to 99) of the worst trials to cancel at each evaluation, got %d", et.TruncationPercentage)
		}
	}
}
