package spec

import (
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// DatastoreFile is a datastore file, the input of `ferry datastore create
// -f`: Azure ML's (azure_blob, azure_data_lake_gen2, azure_file) or one
// of Ferry's own types, local_folder (Path: a folder every node can read,
// such as an NFS mount) and http (URL: a base URL files are fetched
// under). Inputs name paths in it as azureml://datastores/NAME/paths/PATH.
type DatastoreFile struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Type        string            `yaml:"type,omitempty" json:"type,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	// Azure's fields.
	AccountName   string `yaml:"account_name,omitempty" json:"account_name,omitempty"`
	ContainerName string `yaml:"container_name,omitempty" json:"container_name,omitempty"`   // azure_blob
	Filesystem    string `yaml:"filesystem,omitempty" json:"filesystem,omitempty"`           // azure_data_lake_gen2
	FileShareName string `yaml:"file_share_name,omitempty" json:"file_share_name,omitempty"` // azure_file
	Endpoint      string `yaml:"endpoint,omitempty" json:"endpoint,omitempty"`               // core.windows.net
	Protocol      string `yaml:"protocol,omitempty" json:"protocol,omitempty"`               // https | wasbs | abfss
	StoreName     string `yaml:"store_name,omitempty" json:"store_name,omitempty"`           // azure_data_lake_gen1
	// OneLake's (one_lake).
	OneLakeWorkspaceName string             `yaml:"one_lake_workspace_name,omitempty" json:"one_lake_workspace_name,omitempty"`
	Artifact             *DatastoreArtifact `yaml:"artifact,omitempty" json:"artifact,omitempty"`
	// Credentials are accepted so Azure's files load, and never kept:
	// Ferry reads storage anonymously. Only their names reach the server.
	Credentials map[string]string `yaml:"credentials,omitempty" json:"credentials,omitempty"`
	// Ferry's fields.
	Path string `yaml:"path,omitempty" json:"path,omitempty"` // local_folder
	URL  string `yaml:"url,omitempty" json:"url,omitempty"`   // http
}

// DatastoreArtifact is the item of a OneLake datastore.
type DatastoreArtifact struct {
	Type string `yaml:"type,omitempty" json:"type,omitempty"` // lake_house
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
}

// DatastoreTypes are the datastore types Ferry takes. The last three are
// accepted so that Azure's files load, but inputs cannot read them
// (they have no anonymous reads).
var DatastoreTypes = []string{"local_folder", "http", "azure_blob", "azure_data_lake_gen2", "azure_file", "azure_data_lake_gen1", "one_lake"}

const datastoreEmptyHint = "a datastore needs a name and where its files are, e.g. name: shared, type: local_folder and path: /mnt/nfs/data"

// ParseDatastore reads a datastore file strictly (see ParseJob), with
// `--set path=value` overrides applied first, and validates it. A missing
// type is local_folder when path is given and http when url is.
func ParseDatastore(data []byte, sets []string) (*DatastoreFile, error) {
	f, root, err := parseYAML[DatastoreFile](data, sets, "datastore", datastoreEmptyHint, nil)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	f.setDefaults()
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return f, nil
}

// DecodeDatastoreJSON reads a datastore from strict JSON, the API's form,
// and validates it.
func DecodeDatastoreJSON(data []byte) (*DatastoreFile, error) {
	f, root, err := decodeJSON[DatastoreFile](data, "datastore")
	if err != nil {
		return nil, err
	}
	f.setDefaults()
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

func (f *DatastoreFile) setDefaults() {
	if f.Type == "" {
		switch {
		case f.Path != "" && f.URL == "":
			f.Type = "local_folder"
		case f.URL != "" && f.Path == "":
			f.Type = "http"
		}
	}
	if slices.Contains([]string{"azure_blob", "azure_data_lake_gen2", "azure_file"}, f.Type) && f.Endpoint == "" {
		f.Endpoint = "core.windows.net"
	}
}

// CredentialNames are the names of the credentials the file gave, which
// are not kept.
func (f *DatastoreFile) CredentialNames() []string {
	return slices.Sorted(maps.Keys(f.Credentials))
}

// Validate checks the file; every problem is reported, each naming its
// field.
func (f *DatastoreFile) Validate() error {
	var es Errors
	switch {
	case f.Name == "":
		es.add("name", "a datastore needs a name, e.g. name: shared")
	case !datastoreNameRe().MatchString(f.Name):
		es.add("name", "%s is not a valid datastore name: use letters, digits, '_' and '-' (at most 255)", quote(f.Name))
	}
	need := func(field, v, example string) {
		if strings.TrimSpace(v) == "" {
			es.add(field, "a %s datastore needs %s, e.g. %s", f.Type, field, example)
		}
	}
	only := map[string]bool{}
	switch f.Type {
	case "":
		es.add("type", "say what the datastore is: type: local_folder with path (a folder every node can read), type: http with url, or Azure's azure_blob, azure_data_lake_gen2, azure_file")
	case "local_folder":
		need("path", f.Path, "path: /mnt/nfs/data")
		if f.Path != "" && !filepath.IsAbs(f.Path) {
			es.add("path", "%s is not an absolute path: a local_folder datastore is a folder every node reads at the same absolute path, e.g. /mnt/nfs/data", quote(f.Path))
		}
		only["path"] = true
	case "http":
		need("url", f.URL, "url: https://example.com/datasets")
		if f.URL != "" {
			if u, err := url.Parse(f.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				es.add("url", "%s is not an http(s) URL, e.g. https://example.com/datasets", quote(f.URL))
			} else if u.User != nil {
				es.add("url", "a URL with a user or password is not accepted: it would be stored and shown")
			}
		}
		only["url"] = true
	case "azure_blob":
		need("account_name", f.AccountName, "account_name: azuremlexamples")
		need("container_name", f.ContainerName, "container_name: datasets")
		only["account_name"], only["container_name"] = true, true
	case "azure_data_lake_gen2":
		need("account_name", f.AccountName, "account_name: mydatalake")
		need("filesystem", f.Filesystem, "filesystem: my-gen2-container")
		only["account_name"], only["filesystem"] = true, true
	case "azure_file":
		need("account_name", f.AccountName, "account_name: mystorage")
		need("file_share_name", f.FileShareName, "file_share_name: my-share")
		only["account_name"], only["file_share_name"] = true, true
	case "azure_data_lake_gen1":
		need("store_name", f.StoreName, "store_name: mydatalakegen1")
		only["store_name"] = true
	case "one_lake":
		need("one_lake_workspace_name", f.OneLakeWorkspaceName, "one_lake_workspace_name: MyWorkspace")
		only["one_lake_workspace_name"], only["artifact"] = true, true
	default:
		es.add("type", "%s is not a datastore type: use %s", quote(f.Type), joinNames(DatastoreTypes))
	}
	azure := strings.HasPrefix(f.Type, "azure_") || f.Type == "one_lake"
	storage := slices.Contains([]string{"azure_blob", "azure_data_lake_gen2", "azure_file"}, f.Type)
	for _, fs := range []struct {
		field string
		set   bool
	}{
		{"path", f.Path != ""}, {"url", f.URL != ""}, {"account_name", f.AccountName != ""},
		{"container_name", f.ContainerName != ""}, {"filesystem", f.Filesystem != ""}, {"file_share_name", f.FileShareName != ""},
		{"store_name", f.StoreName != ""}, {"one_lake_workspace_name", f.OneLakeWorkspaceName != ""}, {"artifact", f.Artifact != nil},
	} {
		if fs.set && !only[fs.field] && slices.Contains(DatastoreTypes, f.Type) {
			es.add(fs.field, "does not apply to type %s", f.Type)
		}
	}
	if !azure {
		if f.Endpoint != "" {
			es.add("endpoint", "applies only to Azure's datastore types (the storage account's DNS suffix, core.windows.net)")
		}
		if f.Protocol != "" {
			es.add("protocol", "applies only to Azure's datastore types")
		}
		if len(f.Credentials) > 0 {
			es.add("credentials", "applies only to Azure's datastore types; a %s datastore is read as it is", f.Type)
		}
	}
	if storage {
		if f.AccountName != "" && !storageAccountRe().MatchString(f.AccountName) {
			es.add("account_name", "%s is not a storage account name: 3 to 24 lower-case letters and digits", quote(f.AccountName))
		}
		if f.Endpoint != "" && !endpointRe().MatchString(f.Endpoint) {
			es.add("endpoint", "%s is not a DNS suffix such as core.windows.net", quote(f.Endpoint))
		}
	}
	if azure {
		if f.Protocol != "" && !slices.Contains([]string{"https", "wasbs", "abfss"}, f.Protocol) {
			es.add("protocol", "%s is not a protocol: use https, wasbs or abfss", quote(f.Protocol))
		}
	}
	for k := range f.Tags {
		if k == "" {
			es.add("tags", "a tag needs a name")
		}
	}
	return es.err()
}

var (
	datastoreNameRe  = lazyRegexp(`^[A-Za-z0-9_-]{1,255}$`)
	storageAccountRe = lazyRegexp(`^[a-z0-9]{3,24}$`)
	endpointRe       = lazyRegexp(`^core\.[a-z0-9.]+[a-z0-9]$`)
)
