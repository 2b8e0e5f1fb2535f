package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// components is the component command group: command components that
// pipeline steps name.
var components = versionedKind[apitypes.Component, apitypes.ComponentRequest]{
	group: "component", short: "Register command components (Azure ML v2 component files) that pipeline steps name as azureml:NAME:VERSION",
	what: "component", api: client.Components, show: showComponent, table: componentTable,
	pick: newVersionFlag,
	create: createVerb[apitypes.ComponentRequest]{
		short:       "Register a component version: uploads its code (only what the workspace lacks)",
		maxSnapshot: "largest code snapshot to upload (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)",
		read:        (*app).readComponentFile,
	},
	list:      &listVerb{use: "list", short: "List registered component versions", nameHelp: "only the versions of this component"},
	showShort: "Show a component version (--version, default the latest)",
}

// readComponentFile is component create's read: the component's code and
// environment files are uploaded relative to its file.
func (a *app) readComponentFile(o createOpts) (func(context.Context, *client.Client) (apitypes.ComponentRequest, error), error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	comp, err := spec.ParseComponent(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	if o.version != "" {
		comp.Version = o.version
	}
	noteIgnored(a.stderr, o.file, comp.Ignored)
	limit, err := a.snapshotLimit(o.maxSnap)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, c *client.Client) (apitypes.ComponentRequest, error) {
		if err := a.uploadComponent(ctx, c, specFile{name: o.file, data: data}, comp, "", limit); err != nil {
			return apitypes.ComponentRequest{}, err
		}
		raw, err := jsonOf(comp)
		return apitypes.ComponentRequest{Spec: raw}, err
	}, nil
}

func componentTable(w *tabwriter.Writer, cs []*apitypes.Component) {
	fmt.Fprintln(w, "NAME\tVERSION\tDISPLAY NAME\tCREATED\tDESCRIPTION")
	for _, x := range cs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", x.Name, x.Version, orDash(x.DisplayName), fmtTime(&x.Created), orDash(oneLine(x.Description)))
	}
}

func showComponent(w *tabwriter.Writer, c *apitypes.Component) {
	fmt.Fprintf(w, "id:\t%s\n", c.ID)
	if c.DisplayName != "" {
		fmt.Fprintf(w, "display name:\t%s\n", c.DisplayName)
	}
	if c.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", oneLine(c.Description))
	}
	fmt.Fprintf(w, "hash:\t%s\n", c.Hash)
	fmt.Fprintf(w, "created:\t%s\n", fmtTime(&c.Created))
	if s := c.Spec; s != nil {
		fmt.Fprintf(w, "command:\t%s\n", oneLine(s.Command))
		for _, k := range slices.Sorted(maps.Keys(s.Inputs)) {
			in := s.Inputs[k]
			extra := ""
			if in.Default != nil {
				extra = " (default " + *in.Default + ")"
			}
			if in.Optional {
				extra += " (optional)"
			}
			fmt.Fprintf(w, "input %s:\t%s%s\n", k, in.Type, extra)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Outputs)) {
			fmt.Fprintf(w, "output %s:\t%s\n", k, orDash(s.Outputs[k].Type))
		}
	}
}
