package spec

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DataFile is an Azure ML CLI v2 data asset file, the input of `ferry
// data create -f`. Path is the local file or folder holding the data,
// relative to the file; the client uploads it as a snapshot and the
// workspace keeps that snapshot, not the path.
type DataFile struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Version     string            `yaml:"version,omitempty" json:"version,omitempty"`
	Path        string            `yaml:"path,omitempty" json:"path,omitempty"`
	Type        string            `yaml:"type,omitempty" json:"type,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
}

// DataTypes are the data asset types Ferry registers; the first is the
// default, as in Azure. An mltable is kept as the folder it is (its
// MLTable file and what that names); Ferry does not read the table.
var DataTypes = []string{"uri_folder", "uri_file", "mltable"}

// DataTypeFits says whether an input of type input may name a data asset
// of type asset: the same type, or a folder read as the other kind of
// folder (an mltable input of a uri_folder asset, or the reverse), as
// Azure's v1 datasets are read as either.
func DataTypeFits(input, asset string) bool {
	folder := func(t string) bool { return t == "uri_folder" || t == "mltable" }
	return input == "" || input == asset || (folder(input) && folder(asset))
}

const dataEmptyHint = "a data asset needs a name and its files, e.g. name: cifar and path: ./data"

// ParseData reads a data asset file strictly (see ParseJob), with `--set
// path=value` overrides applied first, and validates it. A missing type
// is set to uri_folder, as Azure does.
func ParseData(data []byte, sets []string) (*DataFile, error) {
	f, root, err := parseYAML[DataFile](data, sets, "data asset", dataEmptyHint, datastorePathFirst)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	if f.Type == "" {
		f.Type = DataTypes[0]
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return f, nil
}

// DecodeDataJSON reads a data asset from strict JSON, the API's form, and
// validates it.
func DecodeDataJSON(data []byte) (*DataFile, error) {
	f, root, err := decodeJSON[DataFile](data, "data asset")
	if err != nil {
		return nil, err
	}
	if f.Type == "" {
		f.Type = DataTypes[0]
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

// Validate checks the file; every problem is reported, each naming its
// field. Names and versions follow the rules of environments and models.
func (f *DataFile) Validate() error {
	var es Errors
	switch {
	case f.Name == "":
		es.add("name", "a data asset needs a name, e.g. name: cifar")
	case !envNameRe().MatchString(f.Name):
		es.add("name", "%s is not a valid name: use letters, digits, '.', '-' and '_', starting with a letter or digit", quote(f.Name))
	}
	switch {
	case f.Version == "":
	case f.Version == "latest":
		es.add("version", "latest is a label, not a version: leave version out to get the next number")
	case !envNameRe().MatchString(f.Version):
		es.add("version", "%s is not a valid version: use letters, digits, '.', '-' and '_', such as 1 or 2.0; leave it out to get the next number", quote(f.Version))
	}
	if strings.TrimSpace(f.Path) == "" {
		es.add("path", "a data asset needs its files: path: a file (type: uri_file) or folder (type: uri_folder), relative to the data file")
	} else if IsRemotePath(f.Path) {
		if u, err := ParseDataURI(f.Path); err != nil {
			es.add("path", "%v", err)
		} else if u.Kind == URIAsset {
			es.add("path", "a data asset's path is its files (a local path or a URL), not another asset (%s)", quote(f.Path))
		}
	}
	switch {
	case f.Type != "" && !slices.Contains(DataTypes, f.Type):
		es.add("type", "%s is not a data type: use %s", quote(f.Type), joinNames(DataTypes))
	}
	for k := range f.Tags {
		if k == "" {
			es.add("tags", "a tag needs a name")
		}
	}
	return es.err()
}

// IsDataRef says whether a job input's path names a registered data
// asset (azureml:NAME:VERSION or azureml:NAME@latest) rather than a local
// path or a URI. azureml:// URIs (datastores, registries) are not
// references to an asset.
func IsDataRef(p string) bool {
	return strings.HasPrefix(p, "azureml:") && !strings.HasPrefix(p, "azureml://")
}

// ParseDataRef reads a reference to a registered data asset as job
// inputs write it: azureml:NAME:VERSION or azureml:NAME@latest. The
// version is "latest" for @latest.
func ParseDataRef(ref string) (name, version string, err error) {
	if !IsDataRef(ref) {
		return "", "", fmt.Errorf("data %s: a registered data asset is named azureml:NAME:VERSION or azureml:NAME@latest", quote(ref))
	}
	r := strings.TrimPrefix(ref, "azureml:")
	switch {
	case strings.HasSuffix(r, "@latest"):
		name = strings.TrimSuffix(r, "@latest")
		version = "latest"
	case strings.Contains(r, ":"):
		name, version, _ = strings.Cut(r, ":")
	default:
		return "", "", fmt.Errorf("data %s: say which version: azureml:%s:VERSION, or azureml:%s@latest for the newest", quote(ref), r, r)
	}
	if !envNameRe().MatchString(name) {
		return "", "", fmt.Errorf("data %s: %s is not a valid data asset name", quote(ref), quote(name))
	}
	if version != "latest" && !envNameRe().MatchString(version) {
		return "", "", fmt.Errorf("data %s: %s is not a valid version", quote(ref), quote(version))
	}
	return name, version, nil
}

// datastorePathFirst rewrites the older form of a data asset on a
// datastore, `datastore: azureml:NAME` beside a path relative to it, into
// today's single URI, path: azureml://datastores/NAME/paths/PATH, which
// the rest of Ferry reads.
func datastorePathFirst(root *yaml.Node) *FieldError {
	ds := child(root, "datastore")
	if ds == nil {
		return nil
	}
	name := strings.TrimPrefix(strings.TrimSpace(ds.Value), "azureml:")
	p := child(root, "path")
	switch {
	case ds.Kind != yaml.ScalarNode || !uriDatastoreRe().MatchString(name):
		return &FieldError{Field: "datastore", Line: ds.Line, Message: "must name a datastore, e.g. datastore: azureml:shared_nfs (or drop it and write path: azureml://datastores/NAME/paths/PATH)"}
	case p == nil || p.Kind != yaml.ScalarNode || strings.TrimSpace(p.Value) == "":
		return &FieldError{Field: "path", Line: ds.Line, Message: "is required with datastore: the path of the data inside the datastore, e.g. path: datasets/rows.csv"}
	case IsRemotePath(p.Value):
		return &FieldError{Field: "datastore", Line: ds.Line, Message: fmt.Sprintf("goes with a path inside the datastore, but path is already a URI (%s); drop datastore", p.Value)}
	}
	p.Value = "azureml://datastores/" + name + "/paths/" + strings.TrimLeft(strings.TrimPrefix(p.Value, "./"), "/")
	p.Tag, p.Style = "!!str", 0
	root.Content = without(root, "datastore").Content
	return nil
}
