package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

func (a *app) dataCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "data", Short: "Register data assets (Azure ML v2 data files) that jobs name as azureml:NAME:VERSION"}
	cmd.AddCommand(a.dataCreateCmd(), a.dataListCmd(), a.dataShowCmd(), a.dataDownloadCmd(),
		a.dataArchiveCmd("archive", true), a.dataArchiveCmd("restore", false))
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(listDataNames)
		}
	}
	return cmd
}

// listDataNames completes a data asset's name, and its NAME@latest.
func listDataNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ds, err := c.ListData(ctx, "", false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range ds {
		if !seen[d.Name] {
			seen[d.Name] = true
			out = append(out, d.Name+"\t"+d.Type, d.Name+"@latest")
		}
	}
	return out, nil
}

func (a *app) dataCreateCmd() *cobra.Command {
	var o modelCreateOpts
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Register a data asset version: uploads the file or folder its path names (only what the workspace lacks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			d, err := a.createData(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			return a.print(d, func(w *tabwriter.Writer) { showData(w, d) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "data YAML file (required)")
	f.StringVar(&o.name, "name", "", "data asset name (default: the file's)")
	f.StringVar(&o.version, "version", "", "version to register (default: the file's, else the next number)")
	f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set tags.split=train")
	f.StringVar(&o.maxSnap, "max-snapshot-size", "", "largest data to upload, e.g. 20GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// createData parses the data file, uploads its files content-addressed
// (what the workspace holds is not sent again) and registers the version.
func (a *app) createData(ctx context.Context, c *client.Client, o modelCreateOpts) (*apitypes.DataAsset, error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	sets := o.sets
	if o.name != "" {
		sets = append(sets, "name="+o.name)
	}
	if o.version != "" {
		sets = append(sets, "version="+o.version)
	}
	f, err := spec.ParseData(data, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	limit, err := a.snapshotLimit(o.maxSnap)
	if err != nil {
		return nil, err
	}
	pf := pathField{file: specFile{name: o.file, data: data, sets: sets}, field: "path", value: f.Path}
	var id string
	if !isRemote(f.Path) { // a remote path is kept as a reference; nothing to upload
		if id, err = a.upload(ctx, c, pf, f.Type, limit, false); err != nil {
			return nil, err
		}
	}
	raw, err := jsonOf(f)
	if err != nil {
		return nil, err
	}
	return c.CreateData(ctx, apitypes.DataRequest{Spec: raw, Snapshot: id})
}

func (a *app) dataListCmd() *cobra.Command {
	var name string
	var archived bool
	cmd := &cobra.Command{
		Use:   "list [--name NAME]",
		Short: "List registered data assets, or the versions of one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ds, err := c.ListData(cmd.Context(), name, archived)
			if err != nil {
				return err
			}
			return a.print(ds, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tVERSION\tTYPE\tCREATED\tDESCRIPTION")
				for _, d := range ds {
					v := d.Version
					if d.Archived {
						v += " (archived)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Name, v, d.Type, d.Created.Local().Format("2006-01-02 15:04"), d.Description)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "list the versions of this data asset only")
	cmd.Flags().BoolVar(&archived, "include-archived", false, "list archived versions too")
	return cmd
}

func (a *app) dataShowCmd() *cobra.Command {
	return a.versionedCmd("data asset", "show NAME (--version V | --label latest)", "Show a data asset version; NAME@latest and azureml:NAME:VERSION work too", true,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			d, err := c.GetData(cmd.Context(), name, version)
			if err != nil {
				return err
			}
			return a.print(d, func(w *tabwriter.Writer) { showData(w, d) })
		})
}

func (a *app) dataDownloadCmd() *cobra.Command {
	var dir string
	cmd := a.versionedCmd("data asset", "download NAME (--version V | --label latest) [--download-path DIR]", "Download a data asset version's files to DIR/NAME, as az ml data download does", true,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			d, err := c.GetData(cmd.Context(), name, version)
			if err != nil {
				return err
			}
			if d.Snapshot == "" {
				return fmt.Errorf("data asset %s:%s is kept as a reference to %s; its files are there, not in the workspace", d.Name, d.Version, d.Path)
			}
			dest := filepath.Join(dir, d.Name)
			if err := c.Download(cmd.Context(), d.Snapshot, dest); err != nil {
				return fmt.Errorf("download data asset %s:%s: %w", d.Name, d.Version, err)
			}
			fmt.Fprintln(a.stdout, dest)
			return nil
		})
	cmd.Flags().StringVarP(&dir, "download-path", "p", ".", "directory to download into; the files go to DIR/NAME")
	return cmd
}

func (a *app) dataArchiveCmd(verb string, archived bool) *cobra.Command {
	short := "Archive a data asset version: it is kept, but no longer listed or the latest"
	if !archived {
		short = "Restore an archived data asset version"
	}
	return a.versionedCmd("data asset", verb+" NAME --version V", short, false,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			d, err := c.ArchiveData(cmd.Context(), name, version, archived)
			if err != nil {
				return err
			}
			return a.print(d, func(w *tabwriter.Writer) { showData(w, d) })
		})
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
