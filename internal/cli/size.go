package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/sizes"
)

func (a *app) sizeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "size", Short: "The size catalog: node shapes for clusters and serverless jobs"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List sizes (as az ml compute list-sizes)",
		Args:  cobra.NoArgs,
		RunE:  listRun(a, (*client.Client).ListSizes, sizeTable),
	}
	cmd.AddCommand(list)
	return cmd
}

func sizeTable(w *tabwriter.Writer, ss []sizes.Size) {
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
}
