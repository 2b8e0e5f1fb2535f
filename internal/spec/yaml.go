package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// parseNode reads one YAML document into a node tree.
func parseNode(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{{Message: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, Errors{{Message: "the file is empty; a job needs at least `command:`"}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{Line: root.Line, Message: "the file must be a YAML mapping of fields (field: value)"}}
	}
	return root, nil
}

// check walks node against the Go type t and reports unknown fields and
// values of the wrong kind, with their dotted paths. yaml.v3's own errors
// say neither the path nor, for type errors, the field.
func check(node *yaml.Node, t reflect.Type, path string, e *errs) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	if isNull(node) {
		return
	}
	switch t {
	case reflect.TypeOf(Input{}):
		if node.Kind == yaml.ScalarNode {
			return // a literal input
		}
	case reflect.TypeOf(Environment{}):
		if node.Kind == yaml.ScalarNode {
			return // a reference to a registered environment
		}
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			e.add(path, node.Line, "must be a mapping of fields, got %s", describe(node))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				msg := fmt.Sprintf("unknown field %q", k.Value)
				if s := closest(k.Value, slices.Sorted(maps.Keys(fields))); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				e.add(join(path, k.Value), k.Line, "%s", msg)
				continue
			}
			check(v, ft, join(path, k.Value), e)
		}
	case reflect.Map:
		if node.Kind != yaml.MappingNode {
			e.add(path, node.Line, "must be a mapping, got %s", describe(node))
			return
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				e.add(path, k.Line, "keys must be plain names")
				continue
			}
			check(v, t.Elem(), join(path, k.Value), e)
		}
	case reflect.Interface:
		// free-form (properties and the like)
	case reflect.String:
		if node.Kind != yaml.ScalarNode {
			e.add(path, node.Line, "must be a single value (text), got %s", describe(node))
		}
	case reflect.Int, reflect.Int64:
		if node.Kind != yaml.ScalarNode || node.Tag != "!!int" {
			e.add(path, node.Line, "must be a whole number, got %s", describe(node))
		}
	case reflect.Float64:
		if node.Kind != yaml.ScalarNode || (node.Tag != "!!int" && node.Tag != "!!float") {
			e.add(path, node.Line, "must be a number, got %s", describe(node))
		}
	case reflect.Bool:
		if node.Kind != yaml.ScalarNode || node.Tag != "!!bool" {
			e.add(path, node.Line, "must be true or false, got %s", describe(node))
		}
	}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// yamlFields maps a struct's YAML names to field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// closest returns the candidate nearest to s if it is near enough to be a typo.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// applySet applies one `path=value` override to a mapping node.
func applySet(root *yaml.Node, set string) error {
	path, value, ok := strings.Cut(set, "=")
	path = strings.TrimSpace(path)
	if !ok || path == "" {
		return Errors{{Field: "--set " + set, Message: "write --set path=value, e.g. --set limits.timeout=60"}}
	}
	var val yaml.Node
	if err := yaml.Unmarshal([]byte(value), &val); err != nil || len(val.Content) == 0 {
		val = yaml.Node{Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}}}
	}
	node := root
	parts := strings.Split(path, ".")
	for i, p := range parts {
		if p == "" {
			return Errors{{Field: "--set " + set, Message: "the path has an empty part"}}
		}
		if node.Kind != yaml.MappingNode {
			return Errors{{Field: "--set " + set, Message: fmt.Sprintf("%s is not a mapping, so it has no field %q", strings.Join(parts[:i], "."), p)}}
		}
		var next *yaml.Node
		for j := 0; j+1 < len(node.Content); j += 2 {
			if node.Content[j].Value == p {
				next = node.Content[j+1]
				if i == len(parts)-1 {
					node.Content[j+1] = val.Content[0]
					return nil
				}
			}
		}
		if next == nil {
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p}
			if i == len(parts)-1 {
				node.Content = append(node.Content, key, val.Content[0])
				return nil
			}
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			node.Content = append(node.Content, key, next)
		}
		node = next
	}
	return nil
}

// decodeYAML checks a node against v's type, then decodes it.
func decodeYAML(root *yaml.Node, v any) error {
	var e errs
	check(root, reflect.TypeOf(v), "", &e)
	if err := e.err(); err != nil {
		return err
	}
	if err := root.Decode(v); err != nil {
		return Errors{{Message: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	return nil
}

// decodeJSON decodes strict JSON, turning the decoder's errors into field errors.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Errors{{Field: te.Field, Message: fmt.Sprintf("must be %s, got a JSON %s", kindName(te.Type), te.Value)}}
		}
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
			return Errors{{Field: strings.Trim(f, `"`), Message: "unknown field"}}
		}
		return Errors{{Message: "not valid JSON: " + msg}}
	}
	if dec.More() {
		return Errors{{Message: "not valid JSON: more than one value"}}
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text"
	}
	return "a " + t.Kind().String()
}
