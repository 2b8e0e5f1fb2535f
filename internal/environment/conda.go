package environment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// condaFile is what the cache needs from a conda environment file: its
// dependencies, split into conda packages and the pip: list.
type condaFile struct {
	Name     string
	Channels []string
	Deps     []condaDep
	Pip      []string
	// Warnings are sections conda itself would ignore; they go to the log
	// because a misspelt "dependencies" would otherwise build an empty env
	// without a word.
	Warnings []string
}

// condaDep is one conda dependency: a package name and its version
// constraint, the build string and channel left out.
type condaDep struct {
	Spec    string // as written
	Name    string // lower case
	Version string // "=3.11", ">=3.9,<3.12", "" for any
}

// condaSections are the sections conda's environment files have.
var condaSections = []string{"name", "channels", "dependencies", "prefix", "variables"}

// parseCondaFile reads a conda environment file. file is its name inside
// the environment's files, for messages; errors name it as conda_file.
func parseCondaFile(file string, data []byte) (*condaFile, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("conda_file %s: "+format, append([]any{file}, args...)...)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, bad("not valid YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, bad("the file is empty")
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, bad("line %d: the file must be a mapping with name, channels and dependencies, not %s", top.Line, nodeKind(top))
	}
	cf := &condaFile{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode {
				return nil, bad("line %d: name must be a string, not %s", v.Line, nodeKind(v))
			}
			cf.Name = v.Value
		case "channels":
			chans, err := scalarList(v)
			if err != nil {
				return nil, bad("line %d: channels must be a list of channel names: %v", v.Line, err)
			}
			cf.Channels = chans
		case "dependencies":
			if err := cf.readDeps(v); err != nil {
				return nil, bad("%v", err)
			}
		case "prefix", "variables":
		default:
			cf.Warnings = append(cf.Warnings, fmt.Sprintf("conda_file %s: line %d: ignoring section %q (conda's sections are %s)",
				file, k.Line, k.Value, strings.Join(condaSections, ", ")))
		}
	}
	return cf, nil
}

func (cf *condaFile) readDeps(v *yaml.Node) error {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: dependencies must be a list, not %s", v.Line, nodeKind(v))
	}
	for i, item := range v.Content {
		switch item.Kind {
		case yaml.ScalarNode:
			d, err := parseCondaDep(item.Value)
			if err != nil {
				return fmt.Errorf("line %d: dependencies item %d: %v", item.Line, i+1, err)
			}
			cf.Deps = append(cf.Deps, d)
		case yaml.MappingNode:
			for j := 0; j+1 < len(item.Content); j += 2 {
				k, pv := item.Content[j], item.Content[j+1]
				if k.Value != "pip" {
					return fmt.Errorf("line %d: dependencies item %d is a mapping with key %q; only pip: may be a mapping there", k.Line, i+1, k.Value)
				}
				reqs, err := scalarList(pv)
				if err != nil {
					return fmt.Errorf("line %d: pip: must be a list of requirements: %v", pv.Line, err)
				}
				cf.Pip = append(cf.Pip, reqs...)
			}
		default:
			return fmt.Errorf("line %d: dependencies item %d must be a package like numpy>=1.2 or a pip: list, not %s", item.Line, i+1, nodeKind(item))
		}
	}
	return nil
}

// scalarList reads a YAML list of strings.
func scalarList(n *yaml.Node) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("got %s", nodeKind(n))
	}
	var out []string
	for i, c := range n.Content {
		if c.Kind != yaml.ScalarNode || strings.TrimSpace(c.Value) == "" {
			return nil, fmt.Errorf("item %d is %s, not a string", i+1, nodeKind(c))
		}
		out = append(out, c.Value)
	}
	return out, nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" || n.Value == "" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// parseCondaDep splits a conda match spec such as "python=3.11",
// "conda-forge::numpy >=1.2", "python 3.11.* *_cpython" or
// "python=3.11.2=h123_0" into its name and version constraint.
func parseCondaDep(s string) (condaDep, error) {
	d := condaDep{Spec: s}
	rest := strings.TrimSpace(s)
	if i := strings.LastIndex(rest, "::"); i >= 0 {
		rest = rest[i+2:]
	}
	n := 0
	for n < len(rest) && isNameByte(rest[n]) {
		n++
	}
	if n == 0 {
		return d, fmt.Errorf("%q does not start with a package name", s)
	}
	d.Name = strings.ToLower(rest[:n])
	rest = strings.TrimSpace(rest[n:])
	switch {
	case rest == "":
	case strings.HasPrefix(rest, "["):
		return d, fmt.Errorf("%q: bracket options are not supported; write name=version", s)
	case rest[0] == '=' && !strings.HasPrefix(rest, "=="):
		// name=version[=build]: conda reads a single "=" as "this version
		// or any that starts with it".
		v, _, _ := strings.Cut(rest[1:], "=")
		d.Version = "=" + v
	case strings.ContainsRune("<>!=~", rune(rest[0])):
		d.Version = strings.Join(strings.Fields(rest), "")
	default:
		// "name version [build]"
		d.Version = strings.Fields(rest)[0]
	}
	return d, nil
}

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.'
}

// pythonConstraint is a version constraint on the interpreter: a choice
// (|) of conjunctions (,) of comparisons, as conda writes them.
type pythonConstraint struct {
	text string
	alts [][]versionTerm
}

type versionTerm struct {
	op     string // "=" (this version or one that starts with it), "==", "!=", ">=", "<=", ">", "<"
	v      []int
	prefix bool // a trailing .* on == or !=
}

// parseConstraint reads a constraint like "3.11", "=3.11", "==3.11.*",
// ">=3.9,<3.12" or "3.10|3.11". A bare version means the version or any
// that starts with it, as python_version: 3.11 means any 3.11.x.
func parseConstraint(text string) (*pythonConstraint, error) {
	c := &pythonConstraint{text: text}
	if strings.TrimSpace(text) == "" {
		return c, nil
	}
	for alt := range strings.SplitSeq(text, "|") {
		var terms []versionTerm
		for t := range strings.SplitSeq(alt, ",") {
			t = strings.TrimSpace(t)
			term := versionTerm{op: "="}
			for _, op := range []string{"==", "!=", ">=", "<=", "~=", ">", "<", "="} {
				if strings.HasPrefix(t, op) {
					term.op, t = op, strings.TrimSpace(t[len(op):])
					break
				}
			}
			if strings.HasSuffix(t, "*") {
				t = strings.TrimSuffix(strings.TrimSuffix(t, "*"), ".")
				term.prefix = true
			}
			v, err := parseVersion(t)
			if err != nil {
				return nil, fmt.Errorf("version %q: %v", text, err)
			}
			term.v = v
			if term.op == "~=" {
				// ~=3.9 is >=3.9 and 3.*, as pip defines it.
				if len(v) < 2 {
					return nil, fmt.Errorf("version %q: ~= needs at least two parts", text)
				}
				terms = append(terms, versionTerm{op: ">=", v: v}, versionTerm{op: "=", v: v[:len(v)-1]})
				continue
			}
			terms = append(terms, term)
		}
		c.alts = append(c.alts, terms)
	}
	return c, nil
}

func parseVersion(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("no version number")
	}
	var v []int
	for p := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a number", p)
		}
		v = append(v, n)
	}
	return v, nil
}

// any reports whether the constraint allows every version.
func (c *pythonConstraint) any() bool { return len(c.alts) == 0 }

// match reports whether version v (major, minor, micro) satisfies c.
func (c *pythonConstraint) match(v []int) bool {
	if c.any() {
		return true
	}
	for _, terms := range c.alts {
		ok := true
		for _, t := range terms {
			if !t.match(v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func (t versionTerm) match(v []int) bool {
	startsWith := len(v) >= len(t.v) && slices.Equal(v[:len(t.v)], t.v)
	cmp := compareVersions(v, t.v)
	switch t.op {
	case "=":
		return startsWith
	case "==":
		return t.prefix && startsWith || !t.prefix && cmp == 0
	case "!=":
		return !(t.prefix && startsWith || !t.prefix && cmp == 0)
	case ">=":
		return cmp >= 0
	case "<=":
		return cmp <= 0
	case ">":
		return cmp > 0
	case "<":
		return cmp < 0
	}
	return false
}

// compareVersions compares a and b with missing parts read as 0, so that
// 3.11 == 3.11.0.
func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// pinnedMinor is the major.minor every version matching c starts with, if
// there is one: it names the interpreter to look for first (python3.11).
func (c *pythonConstraint) pinnedMinor() string {
	var pin string
	for _, terms := range c.alts {
		found := ""
		for _, t := range terms {
			if (t.op == "=" || t.op == "==") && len(t.v) >= 2 {
				found = fmt.Sprintf("%d.%d", t.v[0], t.v[1])
			}
		}
		if found == "" || pin != "" && pin != found {
			return ""
		}
		pin = found
	}
	return pin
}

// micromambaHint says how a node gets micromamba: Debian 12 has no package
// of it (apt-cache policy micromamba finds none).
const micromambaHint = "a single static binary from conda-forge's micromamba releases; Debian 12 has no package of it"

// noCondaHelp says what a conda file may hold on a node without conda.
const noCondaHelp = "Without conda, Ferry makes a virtualenv instead, and only of a file whose dependencies are python (a version the node has), pip and a pip: list; micromamba is " + micromambaHint

// condaTools are the conda implementations the cache uses, in the order
// it prefers them: micromamba and mamba solve much faster than conda.
var condaTools = []string{"micromamba", "mamba", "conda"}

// findCondaTool returns the first of condaTools on path, or "".
func findCondaTool(path string) string {
	for _, name := range condaTools {
		if found := lookPathAll(path, name); len(found) > 0 {
			return found[0]
		}
	}
	return ""
}

// condaCreateArgs is the command line that creates the env at prefix from
// file with tool.
func condaCreateArgs(tool, prefix, file string) []string {
	if filepath.Base(tool) == "micromamba" {
		return []string{"create", "-y", "-p", prefix, "-f", file}
	}
	return []string{"env", "create", "-p", prefix, "-f", file}
}

// buildConda makes the env of a KindConda spec at prefix: with conda (or
// mamba, micromamba) when the node has it, otherwise as a virtualenv when
// the file asks for nothing but python, pip and pip packages. work is a
// folder for the pip requirements file the virtualenv needs.
func buildConda(ctx context.Context, s *Spec, contextDir, work, prefix string, log logWriter) (builder, python string, err error) {
	file, err := contextFile(contextDir, s.CondaFile, "conda_file")
	if err != nil {
		return "", "", err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("conda_file %s: %w", s.CondaFile, err)
	}
	cf, err := parseCondaFile(s.CondaFile, data)
	if err != nil {
		return "", "", buildErr("%v", err)
	}
	for _, w := range cf.Warnings {
		fmt.Fprintf(log, "ferry: %s\n", w)
	}
	path := os.Getenv("PATH")
	if tool := findCondaTool(path); tool != "" {
		name := filepath.Base(tool)
		args := condaCreateArgs(tool, prefix, file)
		what := name + " env create"
		if name == "micromamba" {
			what = "micromamba create"
		}
		if err := runTool(ctx, log, contextDir, what, tool, args...); err != nil {
			return "", "", err
		}
		return name, "", nil
	}

	want := &pythonConstraint{}
	var condaOnly []string
	for _, d := range cf.Deps {
		switch d.Name {
		case "pip":
		case "python":
			c, err := parseConstraint(d.Version)
			if err != nil {
				return "", "", buildErr("conda_file %s: python %v", s.CondaFile, err)
			}
			if !c.any() {
				want.text = strings.TrimPrefix(want.text+","+d.Version, ",")
				want.alts = andConstraints(want.alts, c.alts)
			}
		default:
			condaOnly = append(condaOnly, d.Name)
		}
	}
	if len(condaOnly) > 0 {
		return "", "", buildErr("conda_file %s needs conda for %s, but this node has no conda, mamba or micromamba; install one, or move them under pip:. %s",
			s.CondaFile, strings.Join(condaOnly, ", "), noCondaHelp)
	}
	py, err := findPython(ctx, path, want)
	if err != nil {
		get := "a python that matches"
		if pin := want.pinnedMinor(); pin != "" {
			get = "python" + pin
		}
		return "", "", buildErr("conda_file %s asks for python%s, but %v. Without conda, mamba or micromamba Ferry makes a virtualenv of a python on the node that matches: install %s on the node, pin the python it has, or put micromamba on the PATH of the account jobs run as (%s)",
			s.CondaFile, want.text, err, get, micromambaHint)
	}
	fmt.Fprintf(log, "ferry: this node has no conda, mamba or micromamba; conda_file %s needs only python and pip packages, so it becomes a virtualenv\n", s.CondaFile)
	var reqs string
	if len(cf.Pip) > 0 {
		reqs = filepath.Join(work, "pip-requirements.txt")
		if err := os.WriteFile(reqs, []byte(strings.Join(cf.Pip, "\n")+"\n"), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := buildVenv(ctx, py, prefix, reqs, contextDir, log); err != nil {
		return "", "", err
	}
	return builderVenv, py.String(), nil
}

// andConstraints is a and b: every pair of their alternatives joined.
func andConstraints(a, b [][]versionTerm) [][]versionTerm {
	if len(a) == 0 {
		return b
	}
	var out [][]versionTerm
	for _, x := range a {
		for _, y := range b {
			out = append(out, append(slices.Clone(x), y...))
		}
	}
	return out
}
