package spec

import (
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Pipeline and component files are read leniently: Azure's own examples
// carry fields Ferry has no use for (services on a step, on_init, a
// datastore), and refusing them would refuse the files. Fields that do
// not change what runs are decoded where Ferry knows them and otherwise
// listed (Ignored), so that `ferry job create` and `job show` can say
// what was left aside. A value of the wrong kind is still an error.

// decodeLenient decodes n into v (a pointer) without refusing unknown
// fields, and adds the dotted paths of the fields v's type lacks, under
// path, to ignored.
func decodeLenient(n *yaml.Node, v any, path string, ignored *[]string) error {
	if err := n.Decode(v); err != nil {
		return err
	}
	unknownFields(n, reflect.TypeOf(v).Elem(), path, ignored)
	return nil
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// unknownFields walks n against t and lists the keys t has no field for.
// Types that decode themselves are not looked into: they are strict.
func unknownFields(n *yaml.Node, t reflect.Type, path string, ignored *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || n == nil {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := fieldsOf(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i].Value, n.Content[i+1]
			ft, ok := fields.types[k]
			if !ok {
				*ignored = append(*ignored, join(path, k))
				continue
			}
			unknownFields(val, ft, join(path, k), ignored)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			unknownFields(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), ignored)
		}
	}
}

// mappingKeys returns the keys of a mapping node, in file order.
func mappingKeys(n *yaml.Node) []string {
	var ks []string
	for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		ks = append(ks, n.Content[i].Value)
	}
	return ks
}

// child returns the value of key in a mapping node, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// yamlError words a yaml.v3 decoding error for a file.
func yamlError(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	return &FieldError{Message: msg}
}

// sortedIgnored is ignored without duplicates, sorted.
func sortedIgnored(ignored []string) []string {
	slices.Sort(ignored)
	return slices.Compact(ignored)
}
