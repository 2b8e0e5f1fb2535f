package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

func (a *app) datastoreCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "datastore", Short: "Datastores that inputs name as azureml://datastores/NAME/paths/PATH: a folder every node reads, an http(s) base URL, or a public Azure blob container"}
	cmd.AddCommand(a.datastoreCreateCmd(), a.datastoreListCmd(), a.datastoreShowCmd(), a.datastoreDeleteCmd())
	for _, sub := range cmd.Commands() {
		if sub.Name() == "show" || sub.Name() == "delete" {
			sub.ValidArgsFunction = a.firstArg(listDatastoreNames)
		}
	}
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
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			if name != "" {
				sets = append(sets, "name="+name)
			}
			f, err := spec.ParseDatastore(data, sets)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			// Only the credentials' names leave this machine.
			for k := range f.Credentials {
				f.Credentials[k] = ""
			}
			raw, err := jsonOf(f)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			d, err := c.CreateDatastore(cmd.Context(), apitypes.DatastoreRequest{Spec: raw})
			if err != nil {
				return err
			}
			if len(d.CredentialsNotKept) > 0 {
				fmt.Fprintf(a.stderr, "note: credentials (%s) are not kept: Ferry reads %s storage anonymously, so the container must allow public reads\n",
					strings.Join(d.CredentialsNotKept, ", "), d.Type)
			}
			return a.print(d, func(w *tabwriter.Writer) { showDatastore(w, d) })
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "datastore YAML file (required)")
	fl.StringVarP(&name, "name", "n", "", "datastore name (default: the file's)")
	fl.StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) datastoreListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List datastores",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ds, err := c.ListDatastores(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(ds, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tTYPE\tWHERE")
				for _, d := range ds {
					n := d.Name
					if d.BuiltIn {
						n += " (built in)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", n, d.Type, datastoreWhere(d))
				}
			})
		},
	}
}

// datastoreName is the name given as the argument or --name.
func datastoreName(args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && args[0] != flag:
		return "", fmt.Errorf("two names given (%s and --name %s); give one", args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "", errors.New("say which datastore: ferry datastore COMMAND NAME (ferry datastore list shows them)")
}

func (a *app) datastoreShowCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a datastore (never credentials: none are kept)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := datastoreName(args, name)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			d, err := c.GetDatastore(cmd.Context(), n)
			if err != nil {
				return err
			}
			return a.print(d, func(w *tabwriter.Writer) { showDatastore(w, d) })
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "datastore name")
	return cmd
}

func (a *app) datastoreDeleteCmd() *cobra.Command {
	var name string
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a datastore (jobs submitted before keep what their inputs resolved to)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := datastoreName(args, name)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.DeleteDatastore(cmd.Context(), n); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "deleted datastore %s\n", n)
			return nil
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "datastore name")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask (ferry never asks; accepted as az ml takes it)")
	return cmd
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
