package spec

import "gopkg.in/yaml.v3"

// upgradeLegacy rewrites, in place, the spellings that Azure ML's CLI v2
// accepted before its schemas settled and that files in the wild still
// use, into today's: every later step (check, decode, Validate) then sees
// one form and reports problems against the field names users read in the
// current reference. The rewrites keep each node's line.
//
//   - code: {local_path: ./src}           → code: ./src
//   - build: {local_path: ./ctx, ...}     → build: {path: ./ctx, ...}
//   - model: {local_path: ./m, ...}       → model: {path: ./m, ...}
//   - inputs.X: {folder: URL}             → {type: uri_folder, path: URL}
//   - inputs.X: {file: URL}               → {type: uri_file, path: URL}
//   - inputs.X: {dataset: {local_path: P}} or {dataset: P} → {path: P}
//   - services.X: {job_service_type: T}   → {type: T} (Azure's YAML key today)
//
// A mapping that already has the current field is left alone, so that the
// strict decoder still reports the mix as a problem.
func upgradeLegacy(n *yaml.Node) {
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, c := range n.Content {
			upgradeLegacy(c)
		}
		return
	case yaml.MappingNode:
	default:
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		switch k {
		case "code":
			if lp := child(v, "local_path"); lp != nil && lp.Kind == yaml.ScalarNode && len(v.Content) == 2 {
				n.Content[i+1] = lp
				continue
			}
		case "build", "model":
			renameKey(v, "local_path", "path")
		case "services":
			// Azure's schema names a service's type job_service_type in
			// YAML (type in its REST API and in Ferry).
			if v.Kind == yaml.MappingNode {
				for j := 1; j < len(v.Content); j += 2 {
					renameKey(v.Content[j], "job_service_type", "type")
				}
			}
		case "inputs":
			if v.Kind == yaml.MappingNode {
				for j := 1; j < len(v.Content); j += 2 {
					upgradeLegacyInput(v.Content[j])
				}
			}
		}
		upgradeLegacy(n.Content[i+1])
	}
}

// upgradeLegacyInput rewrites one data input written in an older form.
func upgradeLegacyInput(in *yaml.Node) {
	if in.Kind != yaml.MappingNode || child(in, "path") != nil {
		return
	}
	for _, old := range []struct{ key, typ string }{{"folder", "uri_folder"}, {"file", "uri_file"}, {"dataset", ""}} {
		v := child(in, old.key)
		if v == nil {
			continue
		}
		if lp := child(v, "local_path"); lp != nil {
			v = lp
		}
		if v.Kind != yaml.ScalarNode {
			return
		}
		line := in.Content[0].Line
		for i := 0; i+1 < len(in.Content); i += 2 {
			if in.Content[i].Value == old.key {
				in.Content[i] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "path", Line: in.Content[i].Line, Column: in.Content[i].Column}
				in.Content[i+1] = v
			}
		}
		if old.typ != "" && child(in, "type") == nil {
			in.Content = append(in.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "type", Line: line},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: old.typ, Line: line})
		}
		return
	}
}

// renameKey renames key from to to in mapping n, unless n already has to.
func renameKey(n *yaml.Node, from, to string) {
	if n == nil || n.Kind != yaml.MappingNode || child(n, to) != nil {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == from {
			k := *n.Content[i]
			k.Value = to
			n.Content[i] = &k
		}
	}
}

// privateNetworkFirst reads the first CLI v2's private_network_connection
// (true: the deployment reaches no public network) as today's
// egress_public_network_access (disabled | enabled).
func privateNetworkFirst(root *yaml.Node) *FieldError {
	old := child(root, "private_network_connection")
	if old == nil {
		return nil
	}
	var private bool
	if old.Kind != yaml.ScalarNode || old.Decode(&private) != nil {
		return &FieldError{Field: "private_network_connection", Line: old.Line, Message: "must be true or false (today written egress_public_network_access: disabled | enabled)"}
	}
	if child(root, "egress_public_network_access") != nil {
		return &FieldError{Field: "private_network_connection", Line: old.Line, Message: "is the older spelling of egress_public_network_access; give only one of them"}
	}
	v := "enabled"
	if private {
		v = "disabled"
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "private_network_connection" {
			root.Content[i] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "egress_public_network_access", Line: old.Line}
			root.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Line: old.Line}
		}
	}
	return nil
}
