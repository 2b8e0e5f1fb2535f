package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// models is the model command group: `az ml model`'s verbs, and
// download.
var models = versionedKind[apitypes.Model, apitypes.ModelRequest]{
	group: "model", short: "Register models (Azure ML v2 model files) and fetch their files",
	what: "model", api: client.Models, show: showModel, table: assetTable(aboutModel),
	pick: versionFlagsOf(spec.ParseModelRef), about: aboutModel,
	create: createVerb[apitypes.ModelRequest]{
		short:       "Register a model version: uploads the file or folder its path names (only what the workspace lacks)",
		setExample:  "tags.stage=prod",
		maxSnapshot: "largest model to upload, e.g. 20GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)",
		read: pathFile[apitypes.ModelRequest]{
			what: "model",
			parse: func(data []byte, sets []string) (any, string, string, error) {
				f, err := spec.ParseModel(data, sets)
				if err != nil {
					return nil, "", "", err
				}
				return f, f.Path, "", nil
			},
			request: func(raw json.RawMessage, id string) apitypes.ModelRequest {
				return apitypes.ModelRequest{Spec: raw, Snapshot: id}
			},
		}.read,
	},
	list:      &listVerb{use: "list [--name NAME]", short: "List registered models, or the versions of one", nameHelp: "list the versions of this model only"},
	showShort: "Show a model version; NAME@latest and azureml:NAME:VERSION work too",
	download:  true, complete: true,
}

func aboutModel(m *apitypes.Model) assetAbout {
	return assetAbout{name: m.Name, version: m.Version, typ: m.Type, description: m.Description, archived: m.Archived, created: m.Created, snapshot: m.Snapshot}
}

func showModel(w *tabwriter.Writer, m *apitypes.Model) {
	fmt.Fprintf(w, "name:\t%s\n", m.Name)
	fmt.Fprintf(w, "version:\t%s\n", m.Version)
	fmt.Fprintf(w, "type:\t%s\n", m.Type)
	if m.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", m.Description)
	}
	for _, kv := range []struct {
		what string
		m    map[string]string
	}{{"tags", m.Tags}, {"properties", m.Properties}} {
		if len(kv.m) > 0 {
			fmt.Fprintf(w, "%s:\t%s\n", kv.what, formatMap(kv.m))
		}
	}
	if m.Archived {
		fmt.Fprintf(w, "archived:\tyes (`ferry model restore %s --version %s` brings it back)\n", m.Name, m.Version)
	}
	fmt.Fprintf(w, "snapshot:\t%s\n", m.Snapshot)
	fmt.Fprintf(w, "created:\t%s\n", m.Created.Local().Format("2006-01-02 15:04:05"))
	fmt.Fprintf(w, "use it in a deployment as:\tmodel: %s\n", m.ID)
}

// formatMap shows tags or properties as k=v, sorted by key.
func formatMap(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}
