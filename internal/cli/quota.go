package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
)

func (a *app) quotaCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "quota", Short: "Core quotas per size family: a scale-up that would pass one does not happen"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List each family's core quota and the cores its nodes hold now",
		Args:  cobra.NoArgs,
		RunE:  listRun(a, (*client.Client).ListQuotas, quotaTable),
	}
	set := &cobra.Command{
		Use:   "set FAMILY CORES",
		Short: "Set a family's core quota (e.g. standardDSv2Family 16), or lowPriority: that of all low-priority nodes together",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cores, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("CORES: %q is not a whole number", args[1])
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]apitypes.Quota, error) {
				return c.SetQuota(cmd.Context(), args[0], cores)
			}, quotaTable)
		},
	}
	enable := &cobra.Command{
		Use:   "enable-size SIZE",
		Short: "Let clusters of a restricted size be made (owners only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.EnableSize(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "size %s enabled\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(list, set, enable)
	return cmd
}

func quotaTable(w *tabwriter.Writer, qs []apitypes.Quota) {
	fmt.Fprintln(w, "FAMILY\tUSED\tLIMIT\tSET")
	for _, q := range qs {
		set := "default"
		if q.Set {
			set = "set"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", q.Family, q.Used, q.Limit, set)
	}
}
