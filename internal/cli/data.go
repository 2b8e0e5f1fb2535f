package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// dataAssets is the data command group: `az ml data`'s verbs, and
// download.
var dataAssets = versionedKind[apitypes.DataAsset, apitypes.DataRequest]{
	group: "data", short: "Register data assets (Azure ML v2 data files) that jobs name as azureml:NAME:VERSION",
	what: "data asset", api: client.DataAssets, show: showData, table: assetTable(aboutData),
	pick: versionFlagsOf(func(arg string) (string, string, error) {
		return spec.ParseDataRef("azureml:" + strings.TrimPrefix(arg, "azureml:"))
	}),
	about: aboutData,
	create: createVerb[apitypes.DataRequest]{
		short:       "Register a data asset version: uploads the file or folder its path names (only what the workspace lacks)",
		setExample:  "tags.split=train",
		maxSnapshot: "largest data to upload, e.g. 20GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)",
		read: pathFile[apitypes.DataRequest]{
			what: "data asset",
			parse: func(data []byte, sets []string) (any, string, string, error) {
				f, err := spec.ParseData(data, sets)
				if err != nil {
					return nil, "", "", err
				}
				return f, f.Path, f.Type, nil
			},
			remoteKept: true,
			request: func(raw json.RawMessage, id string) apitypes.DataRequest {
				return apitypes.DataRequest{Spec: raw, Snapshot: id}
			},
		}.read,
	},
	list:      &listVerb{use: "list [--name NAME]", short: "List registered data assets, or the versions of one", nameHelp: "list the versions of this data asset only"},
	showShort: "Show a data asset version; NAME@latest and azureml:NAME:VERSION work too",
	download:  true, complete: true,
}

func aboutData(d *apitypes.DataAsset) assetAbout {
	return assetAbout{name: d.Name, version: d.Version, typ: d.Type, description: d.Description, archived: d.Archived, created: d.Created, snapshot: d.Snapshot, path: d.Path}
}

func showData(w *tabwriter.Writer, d *apitypes.DataAsset) {
	fmt.Fprintf(w, "name:\t%s\n", d.Name)
	fmt.Fprintf(w, "version:\t%s\n", d.Version)
	fmt.Fprintf(w, "type:\t%s\n", d.Type)
	if d.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", d.Description)
	}
	if len(d.Tags) > 0 {
		fmt.Fprintf(w, "tags:\t%s\n", formatMap(d.Tags))
	}
	if d.Archived {
		fmt.Fprintf(w, "archived:\tyes (`ferry data restore %s --version %s` brings it back)\n", d.Name, d.Version)
	}
	if d.Path != "" {
		fmt.Fprintf(w, "path:\t%s (kept as a reference; jobs fetch it on their nodes)\n", d.Path)
	} else {
		fmt.Fprintf(w, "snapshot:\t%s\n", d.Snapshot)
	}
	fmt.Fprintf(w, "created:\t%s\n", d.Created.Local().Format("2006-01-02 15:04:05"))
	fmt.Fprintf(w, "use it in a job as:\tinputs: {NAME: {type: %s, path: %s}}\n", d.Type, d.ID)
}
