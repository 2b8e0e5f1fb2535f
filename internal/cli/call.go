package cli

import (
	"context"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
)

// connectPrint connects to the workspace, makes one call and prints what
// it returns: as JSON or YAML with -o, else as a table by table. It is
// the body of most commands that show, list or change one thing.
func connectPrint[T any](ctx context.Context, a *app, call func(c *client.Client) (T, error), table func(w *tabwriter.Writer, v T)) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	v, err := call(c)
	if err != nil {
		return err
	}
	return a.print(v, func(w *tabwriter.Writer) { table(w, v) })
}

// outputFirst makes cmd refuse a bad -o before it does anything else.
func (a *app) outputFirst(cmd *cobra.Command) *cobra.Command {
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := a.checkOutput(); err != nil {
			return err
		}
		return run(cmd, args)
	}
	return cmd
}

// listRun is the RunE of a command without arguments that prints what
// call returns, e.g. (*client.Client).ListSchedules.
func listRun[T any](a *app, call func(c *client.Client, ctx context.Context) (T, error), table func(w *tabwriter.Writer, v T)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		return connectPrint(cmd.Context(), a, func(c *client.Client) (T, error) { return call(c, cmd.Context()) }, table)
	}
}

// nameRun is the RunE of a command whose one argument names what call
// returns, e.g. (*client.Client).GetSchedule.
func nameRun[T any](a *app, call func(c *client.Client, ctx context.Context, name string) (T, error), table func(w *tabwriter.Writer, v T)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return connectPrint(cmd.Context(), a, func(c *client.Client) (T, error) { return call(c, cmd.Context(), args[0]) }, table)
	}
}
