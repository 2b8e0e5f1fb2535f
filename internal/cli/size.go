package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) sizeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "size", Short: "The size catalog: node shapes for clusters and serverless jobs"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List sizes (as az ml compute list-sizes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ss, err := c.ListSizes(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(ss, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tVCPUS\tMEMORY_GIB\tGPUS\tGPU_TYPE\tFAMILY\tPRICE_PER_HOUR\tRESTRICTED")
				for _, s := range ss {
					gpuType := s.GPUType
					if gpuType == "" {
						gpuType = "-"
					}
					restricted := ""
					if s.Restricted {
						restricted = "yes"
					}
					fmt.Fprintf(w, "%s\t%d\t%g\t%d\t%s\t%s\t%.2f\t%s\n", s.Name, s.VCPUs, s.MemoryGiB, s.GPUs, gpuType, s.Family, s.PricePerHour, restricted)
				}
			})
		},
	}
	cmd.AddCommand(list)
	return cmd
}
