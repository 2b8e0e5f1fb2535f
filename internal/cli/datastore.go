package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// datastores are the datastore commands but create, which are the
// datastore command group with it (datastoreCmd).
var datastores = namedKind[apitypes.Datastore, apitypes.DatastoreRequest]{
	api: client.Datastores, arg: datastoreArg, show: showDatastore, table: datastoreTable,
	showVerb:  verbHelp{"show NAME", "Show a datastore (never credentials: none are kept)"},
	listShort: "List datastores",
	del: deleteVerb{
		verbHelp: verbHelp{"delete NAME", "Delete a datastore (jobs submitted before keep what their inputs resolved to)"},
		yesHelp:  "do not ask (ferry never asks; accepted as az ml takes it)",
		done:     func(a *app, name string) { fmt.Fprintf(a.stdout, "deleted datastore %s\n", name) },
	},
}

// datastoreCmd is the datastore command group: datastores' verbs and
// create, whose file's credentials stay here. TAB completes a NAME
// argument, not --name.
func (a *app) datastoreCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "datastore", Short: "Datastores that inputs name as azureml://datastores/NAME/paths/PATH: a folder every node reads, an http(s) base URL, or a public Azure blob container"}
	show, del := datastores.showCmd(a), datastores.deleteCmd(a)
	show.ValidArgsFunction, del.ValidArgsFunction = a.firstArg(listDatastoreNames), a.firstArg(listDatastoreNames)
	cmd.AddCommand(a.datastoreCreateCmd(), datastores.listCmd(a), show, del)
	return cmd
}

func listDatastoreNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ds, err := c.ListDatastores(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range ds {
		out = append(out, d.Name+"\t"+d.Type)
	}
	return out, nil
}

func (a *app) datastoreCreateCmd() *cobra.Command {
	var file, name string
	var sets []string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a datastore, or replace the one of that name (credentials in the file are not sent: Ferry reads storage anonymously)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			f, err := readNamedFile(file, name, sets, spec.ParseDatastore)
			if err != nil {
				return err
			}
			// Only the credentials' names leave this machine.
			for k := range f.Credentials {
				f.Credentials[k] = ""
			}
			raw, err := jsonOf(f)
			if err != nil {
				return err
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*apitypes.Datastore, error) {
				d, err := c.CreateDatastore(cmd.Context(), apitypes.DatastoreRequest{Spec: raw})
				if err == nil && len(d.CredentialsNotKept) > 0 {
					fmt.Fprintf(a.stderr, "note: credentials (%s) are not kept: Ferry reads %s storage anonymously, so the container must allow public reads\n",
						strings.Join(d.CredentialsNotKept, ", "), d.Type)
				}
				return d, err
			}, showDatastore)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "datastore YAML file (required)")
	fl.StringVarP(&name, "name", "n", "", "datastore name (default: the file's)")
	fl.StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func datastoreTable(w *tabwriter.Writer, ds []*apitypes.Datastore) {
	fmt.Fprintln(w, "NAME\tTYPE\tWHERE")
	for _, d := range ds {
		n := d.Name
		if d.BuiltIn {
			n += " (built in)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", n, d.Type, datastoreWhere(d))
	}
}

// datastoreArg is how the datastore commands name a datastore.
var datastoreArg = nameArg{
	help:  "datastore name",
	twice: "two names given (%s and --name %s); give one",
	none:  "say which datastore: ferry datastore COMMAND NAME (ferry datastore list shows them)",
}

// datastoreWhere says where a datastore's files are.
func datastoreWhere(d *apitypes.Datastore) string {
	f := d.Spec
	if f == nil {
		return ""
	}
	switch d.Type {
	case "local_folder":
		return f.Path
	case "http":
		return f.URL
	case "azure_blob":
		return fmt.Sprintf("https://%s.blob.%s/%s", f.AccountName, f.Endpoint, f.ContainerName)
	case "azure_data_lake_gen2":
		return fmt.Sprintf("abfss://%s@%s.dfs.%s", f.Filesystem, f.AccountName, f.Endpoint)
	case "azure_data_lake_gen1":
		return fmt.Sprintf("adl://%s.azuredatalakestore.net (not readable by jobs)", f.StoreName)
	case "one_lake":
		return fmt.Sprintf("OneLake workspace %s (not readable by jobs)", f.OneLakeWorkspaceName)
	case "azure_file":
		return fmt.Sprintf("https://%s.file.%s/%s (not readable by jobs: mount it and use a local_folder datastore)", f.AccountName, f.Endpoint, f.FileShareName)
	}
	return ""
}

func showDatastore(w *tabwriter.Writer, d *apitypes.Datastore) {
	fmt.Fprintf(w, "name:\t%s\n", d.Name)
	fmt.Fprintf(w, "type:\t%s\n", d.Type)
	if d.BuiltIn {
		fmt.Fprintf(w, "built in:\tyes (create a datastore named %s to point it elsewhere)\n", d.Name)
	}
	fmt.Fprintf(w, "where:\t%s\n", datastoreWhere(d))
	if d.Spec != nil && d.Spec.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", d.Spec.Description)
	}
	if d.Spec != nil && len(d.Spec.Tags) > 0 {
		fmt.Fprintf(w, "tags:\t%s\n", formatMap(d.Spec.Tags))
	}
	fmt.Fprintf(w, "use it in a job as:\tinputs: {NAME: {type: uri_folder, path: azureml://datastores/%s/paths/PATH}}\n", d.Name)
}
