package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) quotaCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "quota", Short: "Core quotas per size family: a scale-up that would pass one does not happen"}
	printQuotas := func(qs []apitypes.Quota) error {
		return a.print(qs, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "FAMILY\tUSED\tLIMIT\tSET")
			for _, q := range qs {
				set := "default"
				if q.Set {
					set = "set"
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", q.Family, q.Used, q.Limit, set)
			}
		})
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List each family's core quota and the cores its nodes hold now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			qs, err := c.ListQuotas(cmd.Context())
			if err != nil {
				return err
			}
			return printQuotas(qs)
		},
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
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			qs, err := c.SetQuota(cmd.Context(), args[0], cores)
			if err != nil {
				return err
			}
			return printQuotas(qs)
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
