package apitypes

import (
	"time"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Environment is a registered environment version as the API shows it.
type Environment struct {
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	Description string            `json:"description,omitempty"`
	Hash        string            `json:"hash"`
	Created     time.Time         `json:"created"`
	Spec        *environment.Spec `json:"spec"`
}

// Model is a registered model version as the API shows it. Its files are
// the snapshot Snapshot; `ferry model download` fetches them.
type Model struct {
	ID          string            `json:"id"` // azureml:NAME:VERSION, what deployments name
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	Type        string            `json:"type"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
	Snapshot    string            `json:"snapshot"`
	// PathName is the name of the file or folder registered: a
	// deployment's AZUREML_MODEL_DIR holds the model under it, as
	// Azure's does.
	PathName string    `json:"path_name,omitempty"`
	Hash     string    `json:"hash"`
	Archived bool      `json:"archived,omitempty"`
	Created  time.Time `json:"created"`
}

// DataAsset is a registered data asset version as the API shows it. Its
// files are the snapshot Snapshot; `ferry data download` fetches them,
// and a job input `path: azureml:NAME:VERSION` gets them.
type DataAsset struct {
	ID          string            `json:"id"` // azureml:NAME:VERSION, what job inputs name
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	Type        string            `json:"type"` // uri_file | uri_folder
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Snapshot    string            `json:"snapshot,omitempty"`
	// Path is the remote path (a URL, a blob container's path, a
	// datastore path) of an asset kept as a reference, which has no
	// snapshot: jobs fetch it on their nodes.
	Path     string    `json:"path,omitempty"`
	Hash     string    `json:"hash"`
	Archived bool      `json:"archived,omitempty"`
	Created  time.Time `json:"created"`
}

// Datastore is a datastore as the API shows it: its file less its
// credentials, which are never kept.
type Datastore struct {
	Name string              `json:"name"`
	Type string              `json:"type"`
	Spec *spec.DatastoreFile `json:"spec"`
	// BuiltIn marks the default workspaceblobstore while none of that
	// name was created.
	BuiltIn bool `json:"built_in,omitempty"`
	// CredentialsNotKept names the credentials the file gave, in the
	// answer to its creation only: Ferry reads storage anonymously.
	CredentialsNotKept []string   `json:"credentials_not_kept,omitempty"`
	Created            *time.Time `json:"created,omitempty"`
	Updated            *time.Time `json:"updated,omitempty"`
}

// Component is a registered command component version as the API shows
// it. A pipeline step names it as azureml:NAME:VERSION or
// azureml:NAME@latest.
type Component struct {
	ID          string          `json:"id"` // azureml:NAME:VERSION
	Name        string          `json:"name"`
	Version     string          `json:"version"`
	DisplayName string          `json:"display_name,omitempty"`
	Description string          `json:"description,omitempty"`
	Hash        string          `json:"hash"`
	Created     time.Time       `json:"created"`
	Spec        *spec.Component `json:"spec"`
}

// Reference is something a job file names that the workspace must have:
// an environment, a data asset, a compute. Field is where the file names
// it (environment, inputs.train.path, compute), Kind one of
// ReferenceKinds, Ref the reference as written.
type Reference struct {
	Field string `json:"field"`
	Kind  string `json:"kind"`
	Ref   string `json:"ref"`
}

// ReferenceProblem is a reference the workspace cannot resolve, and why,
// in words that say what to do.
type ReferenceProblem struct {
	Field   string `json:"field"`
	Ref     string `json:"ref"`
	Message string `json:"message"`
}

// StreamedSnapshot is what PutSnapshotStream stored.
type StreamedSnapshot struct {
	ID    string `json:"id"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}
