package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

func (a *app) modelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Register models (Azure ML v2 model files) and fetch their files"}
	cmd.AddCommand(a.modelCreateCmd(), a.modelListCmd(), a.modelShowCmd(), a.modelDownloadCmd(),
		a.modelArchiveCmd("archive", true), a.modelArchiveCmd("restore", false))
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(listModelNames)
		}
	}
	return cmd
}

// listModelNames completes a model's name, and its NAME@latest.
func listModelNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ms, err := c.ListModels(ctx, "", false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, m.Name+"\t"+m.Type, m.Name+"@latest")
		}
	}
	return out, nil
}

type modelCreateOpts struct {
	file, name, version, maxSnap string
	sets                         []string
}

func (a *app) modelCreateCmd() *cobra.Command {
	var o modelCreateOpts
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Register a model version: uploads the file or folder its path names (only what the workspace lacks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			m, err := a.createModel(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			return a.print(m, func(w *tabwriter.Writer) { showModel(w, m) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "model YAML file (required)")
	f.StringVar(&o.name, "name", "", "model name (default: the file's)")
	f.StringVar(&o.version, "version", "", "version to register (default: the file's, else the next number)")
	f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set tags.stage=prod")
	f.StringVar(&o.maxSnap, "max-snapshot-size", "", "largest model to upload, e.g. 20GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// createModel parses the model file, uploads its files the way job code
// is uploaded (content-addressed: what the workspace holds is not sent
// again) and registers the version.
func (a *app) createModel(ctx context.Context, c *client.Client, o modelCreateOpts) (*apitypes.Model, error) {
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
	f, err := spec.ParseModel(data, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	limit, err := a.snapshotLimit(o.maxSnap)
	if err != nil {
		return nil, err
	}
	pf := pathField{file: specFile{name: o.file, data: data, sets: sets}, field: "path", value: f.Path}
	if isRemote(f.Path) {
		return nil, pf.errorf("%q is not a local path; a model's path is a local file or folder, which ferry uploads", f.Path)
	}
	id, err := a.upload(ctx, c, pf, "", limit, false)
	if err != nil {
		return nil, err
	}
	raw, err := jsonOf(f)
	if err != nil {
		return nil, err
	}
	return c.CreateModel(ctx, apitypes.ModelRequest{Spec: raw, Snapshot: id})
}

func (a *app) modelListCmd() *cobra.Command {
	var name string
	var archived bool
	cmd := &cobra.Command{
		Use:   "list [--name NAME]",
		Short: "List registered models, or the versions of one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ms, err := c.ListModels(cmd.Context(), name, archived)
			if err != nil {
				return err
			}
			return a.print(ms, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tVERSION\tTYPE\tCREATED\tDESCRIPTION")
				for _, m := range ms {
					v := m.Version
					if m.Archived {
						v += " (archived)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, v, m.Type, m.Created.Local().Format("2006-01-02 15:04"), m.Description)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "list the versions of this model only")
	cmd.Flags().BoolVar(&archived, "include-archived", false, "list archived versions too")
	return cmd
}

// modelVersionFlags are the flags that pick a version, as in `az ml
// model` and `az ml data`: --version V or --label latest.
// The name goes by --name/-n, as in az ml, or as the argument. what is
// the thing named ("model", "data asset"), for messages.
type modelVersionFlags struct{ what, name, version, label string }

func (v *modelVersionFlags) add(cmd *cobra.Command, labels bool) {
	cmd.Flags().StringVarP(&v.name, "name", "n", "", "the "+v.what+"'s name (or give it as the argument)")
	cmd.Flags().StringVarP(&v.version, "version", "v", "", "the version")
	if labels {
		cmd.Flags().StringVarP(&v.label, "label", "l", "", "a label instead of a version: latest (the newest version not archived)")
	}
}

// pick reads the model a command names: NAME with --version or --label,
// or a reference that carries its version (NAME@latest,
// azureml:NAME:VERSION, NAME:VERSION).
func (v *modelVersionFlags) pick(args []string) (name, version string, err error) {
	var arg string
	switch {
	case len(args) == 1 && v.name != "" && args[0] != v.name:
		return "", "", fmt.Errorf("the %s is %s or %s? give its name once", v.what, args[0], v.name)
	case len(args) == 1:
		arg = args[0]
	case v.name != "":
		arg = v.name
	default:
		return "", "", fmt.Errorf("which %s? give its name: NAME or --name NAME", v.what)
	}
	if v.version != "" && v.label != "" {
		return "", "", errors.New("give --version or --label, not both")
	}
	if v.label != "" && v.label != "latest" {
		return "", "", fmt.Errorf("--label %s: the only label is latest", v.label)
	}
	if strings.ContainsAny(arg, ":@") {
		if v.version != "" || v.label != "" {
			return "", "", fmt.Errorf("%s names its version already; leave out --version and --label", arg)
		}
		if v.what == "data asset" {
			return spec.ParseDataRef("azureml:" + strings.TrimPrefix(arg, "azureml:"))
		}
		return spec.ParseModelRef(arg)
	}
	switch {
	case v.version != "":
		return arg, v.version, nil
	case v.label != "":
		return arg, "latest", nil
	}
	return "", "", fmt.Errorf("say which version of %s %s: --version V, --label latest, or %s@latest", v.what, arg, arg)
}

// modelVersionCmd is a command about one model version, named as
// modelVersionFlags.pick reads it (labels: --label is taken too): run
// gets a connected client, the name and the version. Callers add flags of
// their own to what it returns.
func (a *app) modelVersionCmd(use, short string, labels bool, run func(cmd *cobra.Command, c *client.Client, name, version string) error) *cobra.Command {
	return a.versionedCmd("model", use, short, labels, run)
}

// versionedCmd is modelVersionCmd for any versioned thing (what: "model",
// "data asset").
func (a *app) versionedCmd(what, use, short string, labels bool, run func(cmd *cobra.Command, c *client.Client, name, version string) error) *cobra.Command {
	v := modelVersionFlags{what: what}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, version, err := v.pick(args)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return run(cmd, c, name, version)
		},
	}
	v.add(cmd, labels)
	return cmd
}

func (a *app) modelShowCmd() *cobra.Command {
	return a.modelVersionCmd("show NAME (--version V | --label latest)", "Show a model version; NAME@latest and azureml:NAME:VERSION work too", true,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			m, err := c.GetModel(cmd.Context(), name, version)
			if err != nil {
				return err
			}
			return a.print(m, func(w *tabwriter.Writer) { showModel(w, m) })
		})
}

func (a *app) modelDownloadCmd() *cobra.Command {
	var dir string
	cmd := a.modelVersionCmd("download NAME (--version V | --label latest) [--download-path DIR]", "Download a model version's files to DIR/NAME, as az ml model download does", true,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			m, err := c.GetModel(cmd.Context(), name, version)
			if err != nil {
				return err
			}
			dest := filepath.Join(dir, m.Name)
			if err := c.Download(cmd.Context(), m.Snapshot, dest); err != nil {
				return fmt.Errorf("download model %s:%s: %w", m.Name, m.Version, err)
			}
			fmt.Fprintln(a.stdout, dest)
			return nil
		})
	cmd.Flags().StringVarP(&dir, "download-path", "p", ".", "directory to download into; the files go to DIR/NAME")
	return cmd
}

func (a *app) modelArchiveCmd(verb string, archived bool) *cobra.Command {
	short := "Archive a model version: it is kept, but no longer listed or the latest"
	if !archived {
		short = "Restore an archived model version"
	}
	return a.modelVersionCmd(verb+" NAME --version V", short, false,
		func(cmd *cobra.Command, c *client.Client, name, version string) error {
			m, err := c.ArchiveModel(cmd.Context(), name, version, archived)
			if err != nil {
				return err
			}
			return a.print(m, func(w *tabwriter.Writer) { showModel(w, m) })
		})
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
