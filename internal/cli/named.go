package cli

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
)

// namedKind declares the command group of a kind of thing a workspace
// knows by name (online and batch endpoints, datastores), after az ml:
// how a command names one (arg), how its file is read, how it is
// printed, and its client calls (a client.Named). cmd makes the cobra
// commands from it; the kind's own verbs are in more.
type namedKind[T, R any] struct {
	group, short string
	what         string // what create's --name names: "endpoint"
	api          client.Named[T, R]
	arg          nameArg
	// parse reads the kind's file with its --set overrides.
	parse func(data []byte, sets []string) (R, error)
	show  func(w *tabwriter.Writer, v *T)    // one, as a table
	table func(w *tabwriter.Writer, vs []*T) // list's table
	// names completes the NAME of every command but create and list,
	// given as the argument or --name.
	names lister

	create, update *putVerb[T, R] // nil: none, or the kind's own in more
	showVerb       verbHelp
	listShort      string
	del            deleteVerb
	more           []func(a *app) *cobra.Command
}

// verbHelp is a verb's Use and Short.
type verbHelp struct{ use, short string }

// putVerb is a kind's `create -f FILE` or `update -f FILE`: put (a
// client call, e.g. (*client.Client).CreateOnlineEndpoint) sends the
// file, read with --name and --set.
type putVerb[T, R any] struct {
	verbHelp
	fileHelp, setHelp string
	put               func(c *client.Client, ctx context.Context, v R) (*T, error)
}

// deleteVerb is a kind's `delete NAME`; done says that it is done.
type deleteVerb struct {
	verbHelp
	yesHelp string
	done    func(a *app, name string)
}

// cmd makes the kind's command group.
func (k namedKind[T, R]) cmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: k.group, Short: k.short}
	for _, put := range []*putVerb[T, R]{k.create, k.update} {
		if put != nil {
			cmd.AddCommand(k.putCmd(a, put))
		}
	}
	cmd.AddCommand(k.showCmd(a), k.listCmd(a), k.deleteCmd(a))
	for _, verb := range k.more {
		cmd.AddCommand(verb(a))
	}
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(k.names)
			_ = sub.RegisterFlagCompletionFunc("name", a.complete(k.names))
		}
	}
	return cmd
}

func (k namedKind[T, R]) putCmd(a *app, verb *putVerb[T, R]) *cobra.Command {
	var file, name string
	var sets []string
	cmd := &cobra.Command{
		Use:   verb.use,
		Short: verb.short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if len(args) == 1 {
				n, err := k.arg.pick(args, name)
				if err != nil {
					return err
				}
				name = n
			}
			v, err := readNamedFile(file, name, sets, k.parse)
			if err != nil {
				return err
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*T, error) { return verb.put(c, cmd.Context(), v) }, k.show)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", verb.fileHelp)
	f.StringVarP(&name, "name", "n", "", k.what+" name (default: the file's)")
	f.StringArrayVar(&sets, "set", nil, verb.setHelp)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (k namedKind[T, R]) showCmd(a *app) *cobra.Command {
	return k.arg.cmd(a, k.showVerb.use, k.showVerb.short, func(cmd *cobra.Command, c *client.Client, name string) error {
		v, err := k.api.Get(cmd.Context(), c, name)
		if err != nil {
			return err
		}
		return a.print(v, func(w *tabwriter.Writer) { k.show(w, v) })
	})
}

func (k namedKind[T, R]) listCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: k.listShort,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]*T, error) { return k.api.List(cmd.Context(), c) }, k.table)
		},
	}
}

func (k namedKind[T, R]) deleteCmd(a *app) *cobra.Command {
	var yes bool
	cmd := k.arg.cmd(a, k.del.use, k.del.short, func(cmd *cobra.Command, c *client.Client, name string) error {
		if err := k.api.Delete(cmd.Context(), c, name); err != nil {
			return err
		}
		k.del.done(a, name)
		return nil
	})
	// az ml asks before deleting unless --yes; scripts written for it pass
	// --yes, so it is accepted. Ferry does not ask.
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, k.del.yesHelp)
	return cmd
}

// readNamedFile reads a file of a named kind with parse, --name (name)
// overriding its name.
func readNamedFile[R any](file, name string, sets []string, parse func(data []byte, sets []string) (R, error)) (R, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		var none R
		return none, err
	}
	if name != "" {
		sets = append(sets, "name="+name)
	}
	v, err := parse(data, sets)
	if err != nil {
		return v, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}
