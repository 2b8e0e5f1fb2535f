package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML reads an input written as a plain value (`epochs: 5`, a
// literal) or as a mapping (a data input, or `{value: 5}`).
func (in *Input) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v := n.Value
		*in = Input{Value: &v}
		return nil
	case yaml.MappingNode:
		type plain Input
		var p plain
		if err := decodeStrict(n, &p); err != nil {
			return err
		}
		*in = Input(p)
		return nil
	}
	return fmt.Errorf("line %d: an input must be a value or a mapping with type, path and mode", n.Line)
}

// MarshalYAML writes a literal input as its plain value, the way job files
// write it.
func (in Input) MarshalYAML() (any, error) {
	if in.Value != nil && in.Type == "" && in.Path == "" && in.Mode == "" {
		return *in.Value, nil
	}
	type plain Input
	return plain(in), nil
}

// UnmarshalJSON reads an input as a JSON object ({"value": "5"} or
// {"type": ..., "path": ..., "mode": ...}) or as a plain string, number or
// boolean, which is a literal. Unknown fields are errors.
func (in *Input) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var p struct {
			Value json.RawMessage `json:"value"`
			Type  string          `json:"type"`
			Path  string          `json:"path"`
			Mode  string          `json:"mode"`
		}
		if err := strictJSON(data, &p); err != nil {
			return err
		}
		*in = Input{Type: p.Type, Path: p.Path, Mode: p.Mode}
		if len(p.Value) > 0 && string(p.Value) != "null" {
			v, err := jsonScalar(p.Value)
			if err != nil {
				return fmt.Errorf("an input's value %w", err)
			}
			in.Value = &v
		}
		return nil
	}
	if string(data) == "null" {
		*in = Input{}
		return nil
	}
	v, err := jsonScalar(data)
	if err != nil {
		return fmt.Errorf("an input %w, or an object with type, path and mode", err)
	}
	*in = Input{Value: &v}
	return nil
}

// jsonScalar returns a JSON string's text, or a number or boolean as written.
func jsonScalar(data []byte) (string, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool, float64:
		return string(data), nil
	}
	return "", errors.New("must be a string, number or boolean")
}

// UnmarshalYAML reads an environment written as a reference string
// (`azureml:name:1`, `name@latest`) or as an inline mapping.
func (e *Environment) UnmarshalYAML(n *yaml.Node) error {
	type plain Environment
	var p plain
	if err := refOrMappingYAML(n, &p, &p.Ref, "an environment must be a reference such as azureml:NAME:VERSION or a mapping"); err != nil {
		return err
	}
	*e = Environment(p)
	return nil
}

// refOrMappingYAML decodes a field that is written either as a plain
// reference (set in *ref) or as a mapping, decoded strictly into plain:
// a pointer to the field type's twin without methods, of which ref is
// the Ref field. notEither is the error's text for anything else.
func refOrMappingYAML(n *yaml.Node, plain any, ref *string, notEither string) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*ref = n.Value
		return nil
	case yaml.MappingNode:
		return decodeStrict(n, plain)
	}
	return fmt.Errorf("line %d: %s", n.Line, notEither)
}

// refOrObjectJSON is refOrMappingYAML for JSON: an object is decoded
// strictly into plain, null leaves plain zero, and any scalar is a
// reference (Validate judges whether it is a good one); what names the
// field in the error for anything else.
func refOrObjectJSON(data []byte, plain any, ref *string, what string) error {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) > 0 && data[0] == '{':
		return strictJSON(data, plain)
	case string(data) == "null":
		return nil
	}
	r, err := jsonScalar(data)
	if err != nil {
		return fmt.Errorf("%s %w (a reference) or an object", what, err)
	}
	*ref = r
	return nil
}

// MarshalYAML writes a reference as the plain string job files use.
func (e Environment) MarshalYAML() (any, error) {
	if e.refOnly() {
		return e.Ref, nil
	}
	type plain Environment
	return plain(e), nil
}

// refOnly reports whether the environment is a reference and nothing else.
func (e *Environment) refOnly() bool {
	return e.Ref != "" && e.Name == "" && e.Version == "" && e.Description == "" && e.Image == "" &&
		e.CondaFile == "" && e.Build == nil && e.Python == nil && !e.UserManaged && e.InterpreterPath == "" &&
		len(e.Tags) == 0 && len(e.InferenceConfig) == 0
}

// UnmarshalJSON reads an environment as a JSON object or as a plain string
// (or number), which is a reference. Unknown fields are errors.
func (e *Environment) UnmarshalJSON(data []byte) error {
	type plain Environment
	var p plain
	if err := refOrObjectJSON(data, &p, &p.Ref, "an environment"); err != nil {
		return err
	}
	*e = Environment(p)
	return nil
}

// strictJSON decodes exactly one JSON value, refusing unknown fields.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value; send a single object")
	}
	return nil
}

var unknownJSONRe = lazyRegexp(`^json: unknown field "(.*)"$`)

// decodeJSON decodes a spec of type T from strict JSON and returns it in
// canonical form with a tree of the text (nil when yaml.v3 cannot read it)
// for the lines of later errors. JSON is YAML, so the text is first checked
// like a YAML file: that finds the fields at fault with their paths and
// lines, and also refuses what encoding/json lets through, field names in
// the wrong case ("Command") and keys given twice.
func decodeJSON[T any](data []byte, what string) (*T, *yaml.Node, error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || string(t) == "null" {
		return nil, nil, Errors{{Message: fmt.Sprintf("the %s spec is empty", what)}}
	}
	root, _ := parseTree(data, what)
	if root != nil && root.Kind == yaml.MappingNode {
		if es := check(root, reflect.TypeFor[T]()); len(es) > 0 {
			return nil, nil, es
		}
	} else {
		root = nil
	}
	var v T
	if err := strictJSON(data, &v); err != nil {
		return nil, nil, jsonError(err, data, what)
	}
	c, err := canonical(&v)
	if err != nil {
		return nil, nil, Errors{{Message: "cannot represent the spec as JSON: " + err.Error()}}
	}
	return c, root, nil
}

// jsonError turns an encoding/json error into Errors.
func jsonError(err error, data []byte, what string) Errors {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return Errors{{Line: lineAt(data, syn.Offset), Message: "not valid JSON: " + strings.TrimPrefix(syn.Error(), "json: ")}}
	case errors.As(err, &typ) && typ.Field == "":
		return Errors{{Message: fmt.Sprintf("the %s spec must be a JSON object, got a JSON %s", what, typ.Value)}}
	case errors.As(err, &typ):
		return Errors{{Field: typ.Field, Message: fmt.Sprintf("must be %s, got a JSON %s", kindName(typ.Type), typ.Value)}}
	}
	if m := unknownJSONRe().FindStringSubmatch(err.Error()); m != nil {
		return Errors{{Field: m[1], Message: fmt.Sprintf("unknown field %q", m[1])}}
	}
	return Errors{{Message: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}}
}

// lineAt is the line of a byte offset.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// canonical returns v as the REST API would decode it from its own JSON
// encoding, so that a spec read from YAML and one read from JSON compare
// equal: free-form numbers become float64, empty maps nil, and so on.
func canonical[T any](v *T) (*T, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out T
	if err := strictJSON(data, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// parseYAML runs steps 1 to 5 of the pipeline described in tree.go for a
// spec of type T and returns it with its tree.
//
// first, when not nil, looks at the tree before anything else and may
// report the one problem that makes the rest moot.
func parseYAML[T any](data []byte, sets []string, what, emptyHint string, first func(*yaml.Node) *FieldError) (*T, *yaml.Node, error) {
	root, err := parseTree(data, what)
	if err != nil {
		return nil, nil, err
	}
	if root == nil && len(sets) == 0 {
		return nil, nil, Errors{{Message: fmt.Sprintf("the %s file is empty; %s", what, emptyHint)}}
	}
	if root == nil {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, Errors{{Line: root.Line, Message: fmt.Sprintf("the %s file must be a YAML mapping of fields (field: value), got %s", what, describe(root))}}
	}
	var es Errors
	for _, s := range sets {
		if fe := applySet(root, s); fe != nil {
			es = append(es, fe)
		}
	}
	if len(es) > 0 {
		return nil, nil, es
	}
	if first != nil {
		if fe := first(root); fe != nil {
			return nil, nil, Errors{fe}
		}
	}
	if es := check(root, reflect.TypeFor[T]()); len(es) > 0 {
		return nil, nil, es
	}
	var v T
	if err := decodeStrict(root, &v); err != nil {
		return nil, nil, Errors{{Message: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	c, err := canonical(&v)
	if err != nil {
		return nil, nil, Errors{{Message: "cannot represent the spec as JSON: " + err.Error()}}
	}
	return c, root, nil
}
