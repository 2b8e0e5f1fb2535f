package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// A spec file goes through these steps, each on yaml.v3's node tree:
//
//  1. parseTree: parse one document and flatten it (aliases expanded, `<<`
//     merges resolved), so that every later step sees plain mappings and
//     every node still carries its line;
//     upgradeLegacy then rewrites the older spellings of Azure's files
//     (code: {local_path}, build.local_path, inputs {folder|file|dataset},
//     services' job_service_type) into today's, in place;
//  2. applySet: `--set path=value` overrides;
//  3. check: walk the tree against the Go type, reporting unknown fields
//     (with a suggestion), values of the wrong kind and duplicate keys, all
//     with dotted paths and lines, which yaml.v3's own errors lack;
//  4. decodeStrict: yaml.v3 with KnownFields(true) into the Go type;
//  5. canonical: a trip through JSON, so that what the YAML parser returns is
//     exactly what the REST API would decode from the same job;
//  6. Validate, with the lines of its problems looked up in the tree.

const (
	// maxNodes bounds the flattened tree. Aliases can make a small file
	// expand exponentially ("billion laughs"); no real spec is near this.
	maxNodes = 1 << 16
	// maxDepth bounds nesting, which also stops an alias that contains
	// itself.
	maxDepth = 200
)

// parseTree parses data as one YAML document and returns its flattened root,
// or nil when the document is empty. what names the kind of file in
// messages ("job", "compute").
func parseTree(data []byte, what string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, Errors{syntaxError(err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, Errors{{Line: extra.Line, Message: fmt.Sprintf("the %s file holds more than one YAML document (a second `---`); put one per file", what)}}
	case !errors.Is(err, io.EOF):
		return nil, Errors{syntaxError(err)}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil
	}
	f := flattener{}
	root, fe := f.copy(doc.Content[0], 0)
	if fe != nil {
		return nil, Errors{fe}
	}
	upgradeLegacy(root)
	return root, nil
}

var yamlLineRe = lazyRegexp(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a yaml.v3 parse error into a FieldError with its line.
func syntaxError(err error) *FieldError {
	msg := err.Error()
	if m := yamlLineRe().FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{Line: line, Message: "not valid YAML: " + m[2]}
	}
	return &FieldError{Message: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// flattener copies a node tree with aliases expanded and merges resolved.
type flattener struct{ nodes int }

func (f *flattener) copy(n *yaml.Node, depth int) (*yaml.Node, *FieldError) {
	f.nodes++
	if f.nodes > maxNodes {
		return nil, &FieldError{Line: n.Line, Message: fmt.Sprintf("the file is too large once its aliases are expanded (over %d values)", maxNodes)}
	}
	if depth > maxDepth {
		return nil, &FieldError{Line: n.Line, Message: fmt.Sprintf("the file nests deeper than %d levels (or an alias contains itself)", maxDepth)}
	}
	// Comments and anchors are left behind: nothing reads them, and yaml.v3
	// does not always re-emit comments in odd places as valid YAML.
	c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value, Line: n.Line, Column: n.Column}
	switch n.Kind {
	case yaml.ScalarNode:
		if isNull(c) {
			c.Tag, c.Value, c.Style = "!!null", "null", 0 // an empty null would be written back as ""
		}
		return c, nil
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, &FieldError{Line: n.Line, Message: fmt.Sprintf("alias *%s refers to no anchor", n.Value)}
		}
		return f.copy(n.Alias, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line}, nil
		}
		return f.copy(n.Content[0], depth+1)
	case yaml.SequenceNode:
		for _, e := range n.Content {
			ce, err := f.copy(e, depth+1)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, ce)
		}
		return c, nil
	case yaml.MappingNode:
		return f.mapping(n, c, depth)
	}
	return nil, &FieldError{Line: n.Line, Message: "not valid YAML: unexpected node"}
}

// mapping copies a mapping, resolving a `<<` merge the way yaml.v3 decodes
// one: keys written in the mapping win over merged keys, and among several
// merged mappings the first that has a key wins.
func (f *flattener) mapping(n, c *yaml.Node, depth int) (*yaml.Node, *FieldError) {
	var merge *yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			if merge != nil {
				return nil, &FieldError{Line: k.Line, Message: "a mapping may have only one << merge key"}
			}
			merge = v
			continue
		}
		ck, err := f.copy(k, depth+1)
		if err != nil {
			return nil, err
		}
		cv, err := f.copy(v, depth+1)
		if err != nil {
			return nil, err
		}
		if ck.Kind == yaml.ScalarNode {
			seen[ck.Value] = true
		}
		c.Content = append(c.Content, ck, cv)
	}
	if merge == nil {
		return c, nil
	}
	var sources []*yaml.Node
	if m := deref(merge); m != nil && m.Kind == yaml.SequenceNode {
		sources = m.Content
	} else {
		sources = []*yaml.Node{merge}
	}
	for _, s := range sources {
		if m := deref(s); m == nil || m.Kind != yaml.MappingNode {
			return nil, &FieldError{Line: s.Line, Message: "<< must be followed by a mapping or a list of mappings"}
		}
		cs, err := f.copy(s, depth+1)
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(cs.Content); i += 2 {
			k := cs.Content[i]
			if k.Kind == yaml.ScalarNode {
				if seen[k.Value] {
					continue
				}
				seen[k.Value] = true
			}
			c.Content = append(c.Content, k, cs.Content[i+1])
		}
	}
	return c, nil
}

// deref follows aliases.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// isMerge is yaml.v3's test for a `<<` merge key.
func isMerge(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && (n.Tag == "" || n.Tag == "!" || n.ShortTag() == "!!merge")
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// applySet applies one `--set path=value` override to root, creating the
// mappings on the way as needed. The value is read as a YAML scalar: `3` is
// a number, `true` a boolean, an empty value null.
func applySet(root *yaml.Node, arg string) *FieldError {
	bad := func(format string, args ...any) *FieldError {
		return &FieldError{Field: "--set " + arg, Message: fmt.Sprintf(format, args...)}
	}
	path, value, ok := strings.Cut(arg, "=")
	path = strings.TrimSpace(path)
	if !ok || path == "" {
		return bad("write --set path=value, e.g. --set limits.timeout=3600 or --set compute=local")
	}
	parts := strings.Split(path, ".")
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			return bad("the path %q has an empty part; separate field names with single dots, e.g. limits.timeout", path)
		}
	}
	val := &yaml.Node{Kind: yaml.ScalarNode, Value: strings.TrimSpace(value)}
	if val.Tag = val.ShortTag(); val.Tag == "!!null" {
		val.Value = "null"
	}
	node := root
	for i, p := range parts {
		last := i == len(parts)-1
		idx := -1
		for j := 0; j+1 < len(node.Content); j += 2 {
			if k := node.Content[j]; k.Kind == yaml.ScalarNode && k.Value == p {
				idx = j + 1
			}
		}
		if idx < 0 {
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p}, nil)
			idx = len(node.Content) - 1
		}
		if last {
			node.Content[idx] = val
			return nil
		}
		next := node.Content[idx]
		switch {
		case next == nil || isNull(next):
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			node.Content[idx] = next
		case next.Kind != yaml.MappingNode:
			return bad("%s is %s, not a mapping, so it has no field %q", strings.Join(parts[:i+1], "."), describe(next), parts[i+1])
		}
		node = next
	}
	return nil
}

// Types that YAML may write in a short form.
var (
	inputType = reflect.TypeFor[Input]()
	envType   = reflect.TypeFor[Environment]()
	modelType = reflect.TypeFor[ModelRef]()
	// A sweep's trial (`trial: ./component.yml`) and sampling algorithm
	// (`sampling_algorithm: random`) may be one word as well as a mapping.
	trialType    = reflect.TypeFor[Trial]()
	samplingType = reflect.TypeFor[SamplingAlgorithm]()
)

// renamed points names that people bring from elsewhere (mostly the Azure
// ML v1 SDK) to the field that does the job here.
var renamed = map[reflect.Type]map[string]string{
	reflect.TypeFor[Job](): {
		"source_directory":         "code",
		"script":                   "command",
		"arguments":                "command",
		"compute_target":           "compute",
		"node_count":               "resources.instance_count",
		"max_run_duration_seconds": "limits.timeout",
		"env":                      "environment_variables",
	},
	reflect.TypeFor[Compute](): {
		"vm_size":                       "size",
		"vm_priority":                   "tier",
		"min_nodes":                     "min_instances",
		"max_nodes":                     "max_instances",
		"idle_seconds_before_scaledown": "idle_time_before_scale_down",
	},
}

// intHints say what a whole-number field means, for its type errors.
var intHints = map[string]string{
	"limits.timeout":                    "a whole number of seconds ≥ 0",
	"resources.instance_count":          "a whole number of nodes ≥ 1",
	"min_instances":                     "a whole number of nodes ≥ 0",
	"max_instances":                     "a whole number of nodes ≥ 1",
	"idle_time_before_scale_down":       "a whole number of seconds ≥ 0",
	"idle_time_before_shutdown_minutes": "a whole number of minutes from 15 to 4320",
	"capacity":                          "a whole number of jobs ≥ 0 (0 means one per CPU)",
	"default_time_limit":                "a whole number of seconds ≥ 0 (0 means the partition's default)",
}

// checker walks a tree against a Go type; see check.
type checker struct{ errs Errors }

// check reports, with dotted paths and lines, everything in the tree that
// decoding into t would reject or silently bend: unknown fields, values of
// the wrong kind, fractions for whole numbers, duplicate keys. It also
// rewrites the free-form parts (map[string]any) so that they decode to
// values JSON can carry unchanged: timestamps, binary and custom tags become
// strings, keys become strings, and infinities and NaN become strings.
func check(root *yaml.Node, t reflect.Type) Errors {
	c := checker{}
	c.walk(root, t, "")
	return c.errs
}

func (c *checker) add(path string, n *yaml.Node, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Field: path, Line: n.Line, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) walk(n *yaml.Node, t reflect.Type, path string) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Interface {
		c.freeForm(n, path)
		return
	}
	if isNull(n) {
		return // decodes to the zero value, which Validate judges
	}
	switch t {
	case inputType:
		switch n.Kind {
		case yaml.ScalarNode:
			return // a literal: `epochs: 5`
		case yaml.SequenceNode:
			c.add(path, n, "must be a value (epochs: 5) or a mapping with type, path and mode, got a list")
			return
		}
	case modelType:
		switch n.Kind {
		case yaml.ScalarNode:
			return // a reference: `model: azureml:name:1`
		case yaml.SequenceNode:
			c.add(path, n, "must be a reference such as azureml:NAME:VERSION or a mapping with path, got a list")
			return
		}
	case trialType, samplingType:
		if n.Kind == yaml.ScalarNode {
			return // trial: ./component.yml, sampling_algorithm: random
		}
	case envType:
		switch n.Kind {
		case yaml.ScalarNode:
			return // a reference: `environment: azureml:name:1`
		case yaml.SequenceNode:
			c.add(path, n, "must be a reference such as azureml:NAME:VERSION or a mapping (image, build, python, conda_file or user_managed), got a list")
			return
		}
	}
	switch t.Kind() {
	case reflect.Struct:
		c.structure(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.add(path, n, "must be a mapping of names to values, got %s", describe(n))
			return
		}
		c.keys(n, path, func(k, v *yaml.Node) {
			c.walk(v, t.Elem(), join(path, k.Value))
		})
	case reflect.String:
		var v string
		if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
			c.add(path, n, "must be a single value, got %s", describe(n))
		}
	case reflect.Int, reflect.Int64:
		var v int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
			hint := intHints[path]
			if hint == "" {
				hint = "a whole number"
			}
			c.add(path, n, "must be %s, got %s", hint, describe(n))
		}
	case reflect.Bool:
		var v bool
		if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
			c.add(path, n, "must be true or false, got %s", describe(n))
		}
	case reflect.Float64:
		var v float64
		tag := n.ShortTag()
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			c.add(path, n, "must be a number, got %s", describe(n))
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.add(path, n, "must be a list, got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			c.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		// Every field type of the spec is handled above; a new one must be
		// added here before files can set it.
		c.add(path, n, "cannot be set in a file")
	}
}

// structure checks a mapping against the fields of struct type t.
func (c *checker) structure(n *yaml.Node, t reflect.Type, path string) {
	fields := fieldsOf(t)
	if n.Kind != yaml.MappingNode {
		names := fields.names
		if len(names) > 4 {
			names = append(names[:4:4], "...")
		}
		c.add(path, n, "must be a mapping of fields (%s), got %s", strings.Join(names, ", "), describe(n))
		return
	}
	c.keys(n, path, func(k, v *yaml.Node) {
		ft, ok := fields.types[k.Value]
		if !ok {
			c.add(join(path, k.Value), k, "%s", unknownField(k.Value, t, fields))
			return
		}
		c.walk(v, ft, join(path, k.Value))
	})
}

// keys calls fn for each key and value of a mapping, reporting keys that
// are not plain scalars or that repeat.
func (c *checker) keys(n *yaml.Node, path string, fn func(k, v *yaml.Node)) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var name string
		if k.Kind != yaml.ScalarNode || k.Decode(&name) != nil {
			c.add(path, k, "keys must be plain names, got %s", describe(k))
			continue
		}
		if line, dup := first[k.Value]; dup {
			c.add(join(path, k.Value), k, "is given twice (first at line %d); keep one", line)
			continue
		}
		first[k.Value] = k.Line
		fn(k, v)
	}
}

// freeForm checks and rewrites a free-form value; see check.
func (c *checker) freeForm(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode {
				k.Tag, k.Style = "!!str", k.Style&^yaml.TaggedStyle
			}
		}
		c.keys(n, path, func(k, v *yaml.Node) {
			c.freeForm(v, join(path, k.Value))
		})
	case yaml.SequenceNode:
		for i, e := range n.Content {
			c.freeForm(e, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null", "!!bool", "!!str", "!!int":
		case "!!float":
			var f float64
			if n.Decode(&f) != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				n.Tag = "!!str"
			}
		default:
			n.Tag = "!!str"
		}
		var probe any
		if n.Decode(&probe) != nil {
			n.Tag = "!!str"
		}
	}
}

// structFields is what check needs to know about a struct type.
type structFields struct {
	names []string                // YAML names in declaration order
	types map[string]reflect.Type // by YAML name
}

var fieldCache sync.Map // reflect.Type -> structFields

func fieldsOf(t reflect.Type) structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(structFields)
	}
	f := structFields{types: map[string]reflect.Type{}}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.names = append(f.names, name)
		f.types[name] = sf.Type
	}
	fieldCache.Store(t, f)
	return f
}

// unknownField words the error for a field t does not have, with the most
// likely intended field: a close spelling, a field one level down
// (`timeout` → `limits.timeout`), or the name it has in Azure ML.
func unknownField(name string, t reflect.Type, fields structFields) string {
	msg := fmt.Sprintf("unknown field %q", name)
	if s := suggest(name, fields.names); s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	if s := renamed[t][name]; s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	for _, parent := range fields.names {
		pt := fields.types[parent]
		if pt.Kind() == reflect.Pointer {
			pt = pt.Elem()
		}
		if pt.Kind() != reflect.Struct {
			continue
		}
		if _, ok := fieldsOf(pt).types[name]; ok {
			return msg + fmt.Sprintf("; did you mean %q?", parent+"."+name)
		}
	}
	if len(fields.names) <= 12 {
		return msg + "; the fields here are " + joinNames(fields.names)
	}
	return msg
}

// describe shows a node the user wrote, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return quote(n.Value)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// decodeStrict decodes a node with yaml.v3's KnownFields(true). yaml.v3
// offers that only on a Decoder, so the node is written out and read back.
func decodeStrict(n *yaml.Node, v any) error {
	data, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// lineOf returns the line of the field at a dotted path ("inputs.data.path",
// "schedules.compute_start_stop[0].action") in a tree, or of the deepest
// part of the path that is there; 0 when none is. Keys that contain dots
// are matched whole.
func lineOf(root *yaml.Node, field string) int {
	line, n, rest := 0, root, field
	for rest != "" && n != nil {
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			if end < 0 || err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
				break
			}
			n, rest = n.Content[i], strings.TrimPrefix(rest[end+1:], ".")
			line = n.Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			break
		}
		var next *yaml.Node
		best := -1
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if len(k) > best && (rest == k || strings.HasPrefix(rest, k+".") || strings.HasPrefix(rest, k+"[")) {
				best, next, line = len(k), n.Content[i+1], n.Content[i].Line
			}
		}
		if next == nil {
			break
		}
		n, rest = next, strings.TrimPrefix(rest[best:], ".")
	}
	return line
}

// addLines fills in the lines of problems that lack one from the tree.
func addLines(es Errors, root *yaml.Node) {
	if root == nil {
		return
	}
	for _, e := range es {
		if e.Line == 0 && e.Field != "" {
			e.Line = lineOf(root, e.Field)
		}
	}
}

// FieldLine is the line of field (a dotted path such as inputs.data.path)
// in the YAML text data, or that of the nearest field on its path that is
// there; 0 when data is not YAML or holds neither. Callers outside the
// parser use it to place problems they find later, such as a code folder
// that does not exist.
func FieldLine(data []byte, field string) int {
	root, err := parseTree(data, "spec")
	if err != nil || root == nil {
		return 0
	}
	return lineOf(root, field)
}
