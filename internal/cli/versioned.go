package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
)

// versionedKind declares the command group of a kind of versioned asset
// (model, data, component, environment), after `az ml`: its verbs and
// their help, how its file is read, how its versions are named on the
// command line and printed, and its client calls (a client.Versioned).
// cmd makes the cobra commands from it; what is the kind's own is a hook
// (create.read) or a verb of its own (more).
type versionedKind[T, R any] struct {
	group, short string
	aliases      []string
	what         string // the thing, in help and messages: "model", "data asset"
	api          client.Versioned[T, R]
	show         func(w *tabwriter.Writer, v *T)    // one version, as a table
	table        func(w *tabwriter.Writer, vs []*T) // list's table
	// pick makes how a command names one version of what; labels:
	// --label latest is taken too (show and download; not archive and
	// restore).
	pick func(what string, labels bool) versionPicker
	// about reads a version for download and completion; nil for a kind
	// that has neither.
	about func(v *T) assetAbout

	create createVerb[R]
	list   *listVerb // nil: the kind lists in a verb of its own
	// showShort is show's help; show takes NAME as pick reads it.
	showShort string
	download  bool                          // download NAME: the files of a version
	complete  bool                          // NAME completes from the registered versions
	more      []func(a *app) *cobra.Command // the kind's own verbs
}

// createVerb is a kind's `create -f FILE`.
type createVerb[R any] struct {
	short string
	// setExample, when set, adds --name and --set, whose help shows it as
	// an example ("tags.stage=prod"), as az ml has them.
	setExample string
	// maxSnapshot is --max-snapshot-size's help; "" for no such flag.
	maxSnapshot string
	// read reads and checks the file and the flags, before anything is
	// sent; upload then sends the files it names and returns the request
	// that registers the version.
	read func(a *app, o createOpts) (upload func(ctx context.Context, c *client.Client) (R, error), err error)
}

// listVerb is a kind's `list`: of every asset, or with --name the
// versions of one (and with --include-archived, of a kind that archives,
// the archived ones too).
type listVerb struct{ use, short, nameHelp string }

// assetAbout is what download, completion and assetTable read of a
// version.
type assetAbout struct {
	name, version, typ, description string
	archived                        bool
	created                         time.Time
	snapshot                        string // its files; "" when it is kept as a reference
	path                            string // the reference, when kept as one
}

// cmd makes the kind's command group.
func (k versionedKind[T, R]) cmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: k.group, Aliases: k.aliases, Short: k.short}
	cmd.AddCommand(k.createCmd(a), k.showCmd(a))
	if k.list != nil {
		cmd.AddCommand(k.listCmd(a))
	}
	if k.download {
		cmd.AddCommand(k.downloadCmd(a))
	}
	if k.api.Archives {
		cmd.AddCommand(k.archiveCmd(a, "archive", true), k.archiveCmd(a, "restore", false))
	}
	for _, verb := range k.more {
		cmd.AddCommand(verb(a))
	}
	if k.complete {
		for _, sub := range cmd.Commands() {
			if sub.Name() != "create" && sub.Name() != "list" {
				sub.ValidArgsFunction = a.firstArg(k.names)
			}
		}
	}
	return cmd
}

func (k versionedKind[T, R]) createCmd(a *app) *cobra.Command {
	var o createOpts
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: k.create.short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			upload, err := k.create.read(a, o)
			if err != nil {
				return err
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*T, error) {
				req, err := upload(cmd.Context(), c)
				if err != nil {
					return nil, err
				}
				return k.api.Create(cmd.Context(), c, req)
			}, k.show)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", k.group+" YAML file (required)")
	f.StringVar(&o.version, "version", "", "version to register (default: the file's, else the next number)")
	if k.create.setExample != "" {
		f.StringVar(&o.name, "name", "", k.what+" name (default: the file's)")
		f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set "+k.create.setExample)
	}
	if k.create.maxSnapshot != "" {
		f.StringVar(&o.maxSnap, "max-snapshot-size", "", k.create.maxSnapshot)
	}
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (k versionedKind[T, R]) listCmd(a *app) *cobra.Command {
	var name string
	var archived bool
	cmd := &cobra.Command{
		Use:   k.list.use,
		Short: k.list.short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]*T, error) {
				return k.api.List(cmd.Context(), c, name, archived)
			}, k.table)
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", k.list.nameHelp)
	if k.api.Archives {
		cmd.Flags().BoolVar(&archived, "include-archived", false, "list archived versions too")
	}
	return cmd
}

func (k versionedKind[T, R]) showCmd(a *app) *cobra.Command {
	p := k.pick(k.what, true)
	return versionCmd(p, "show "+p.usage(), k.showShort, func(cmd *cobra.Command, name, version string) error {
		return connectPrint(cmd.Context(), a, func(c *client.Client) (*T, error) {
			return k.api.Get(cmd.Context(), c, name, version)
		}, k.show)
	})
}

func (k versionedKind[T, R]) downloadCmd(a *app) *cobra.Command {
	var dir string
	p := k.pick(k.what, true)
	cmd := versionCmd(p, "download "+p.usage()+" [--download-path DIR]", "Download a "+k.what+" version's files to DIR/NAME, as az ml "+k.group+" download does",
		func(cmd *cobra.Command, name, version string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := k.api.Get(cmd.Context(), c, name, version)
			if err != nil {
				return err
			}
			ab := k.about(v)
			if ab.snapshot == "" {
				return fmt.Errorf("%s %s:%s is kept as a reference to %s; its files are there, not in the workspace", k.what, ab.name, ab.version, ab.path)
			}
			dest := filepath.Join(dir, ab.name)
			if err := c.Download(cmd.Context(), ab.snapshot, dest); err != nil {
				return fmt.Errorf("download %s %s:%s: %w", k.what, ab.name, ab.version, err)
			}
			fmt.Fprintln(a.stdout, dest)
			return nil
		})
	cmd.Flags().StringVarP(&dir, "download-path", "p", ".", "directory to download into; the files go to DIR/NAME")
	return cmd
}

func (k versionedKind[T, R]) archiveCmd(a *app, verb string, archived bool) *cobra.Command {
	short := "Archive a " + k.what + " version: it is kept, but no longer listed or the latest"
	if !archived {
		short = "Restore an archived " + k.what + " version"
	}
	p := k.pick(k.what, false)
	return versionCmd(p, verb+" "+p.usage(), short, func(cmd *cobra.Command, name, version string) error {
		return connectPrint(cmd.Context(), a, func(c *client.Client) (*T, error) {
			return k.api.Archive(cmd.Context(), c, name, version, archived)
		}, k.show)
	})
}

// names completes a NAME of the kind, and its NAME@latest.
func (k versionedKind[T, R]) names(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	vs, err := k.api.List(ctx, c, "", false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if ab := k.about(v); !seen[ab.name] {
			seen[ab.name] = true
			out = append(out, ab.name+"\t"+ab.typ, ab.name+"@latest")
		}
	}
	return out, nil
}

// assetTable is the list table of a kind whose versions about reads
// (model, data).
func assetTable[T any](about func(v *T) assetAbout) func(w *tabwriter.Writer, vs []*T) {
	return func(w *tabwriter.Writer, vs []*T) {
		fmt.Fprintln(w, "NAME\tVERSION\tTYPE\tCREATED\tDESCRIPTION")
		for _, v := range vs {
			ab := about(v)
			version := ab.version
			if ab.archived {
				version += " (archived)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", ab.name, version, ab.typ, ab.created.Local().Format("2006-01-02 15:04"), ab.description)
		}
	}
}

// pathFile is the create.read of a kind whose file's path field names
// the file or folder that holds the version (model, data): it is
// uploaded content-addressed, so what the workspace holds is not sent
// again. A remote path is kept as a reference when remoteKept, and
// refused otherwise.
type pathFile[R any] struct {
	what string
	// parse reads the file with its overrides and returns it, its path
	// and how that is uploaded (its type: uri_file, uri_folder; "" for
	// any file or folder).
	parse      func(data []byte, sets []string) (file any, path, kind string, err error)
	remoteKept bool
	request    func(spec json.RawMessage, snapshot string) R
}

func (p pathFile[R]) read(a *app, o createOpts) (func(context.Context, *client.Client) (R, error), error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	sets := o.overrides()
	f, path, kind, err := p.parse(data, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	limit, err := a.snapshotLimit(o.maxSnap)
	if err != nil {
		return nil, err
	}
	pf := pathField{file: specFile{name: o.file, data: data, sets: sets}, field: "path", value: path}
	remote := isRemote(path)
	if remote && !p.remoteKept {
		return nil, pf.errorf("%q is not a local path; a %s's path is a local file or folder, which ferry uploads", path, p.what)
	}
	return func(ctx context.Context, c *client.Client) (req R, err error) {
		var id string
		if !remote { // a remote path is kept as a reference; nothing to upload
			if id, err = a.upload(ctx, c, pf, kind, limit, false); err != nil {
				return req, err
			}
		}
		raw, err := jsonOf(f)
		if err != nil {
			return req, err
		}
		return p.request(raw, id), nil
	}, nil
}
