package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

func jsonOf(v any) (json.RawMessage, error) { return json.Marshal(v) }

func (a *app) computeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "compute", Short: "Manage compute targets (Azure ML v2 compute files)"}
	var file string
	create := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a compute target from a compute YAML file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			s, err := spec.ParseCompute(data)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.CreateCompute(cmd.Context(), s)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", "compute YAML file (required)")
	_ = create.MarkFlagRequired("file")

	list := &cobra.Command{
		Use:   "list",
		Short: "List compute targets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			vs, err := c.ListComputes(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(vs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tTYPE\tSTATE\tCAPACITY\tACTIVE\tQUEUED")
				for _, v := range vs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\n", v.Name, v.Type, v.State, v.Capacity, v.Active, v.Queued)
				}
			})
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a compute target",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.GetCompute(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a compute target that has no unfinished jobs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.DeleteCompute(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "deleted compute %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, show, del)
	return cmd
}

func showCompute(w *tabwriter.Writer, v *workspace.Compute) {
	fmt.Fprintf(w, "name:\t%s\n", v.Name)
	fmt.Fprintf(w, "type:\t%s\n", v.Type)
	fmt.Fprintf(w, "state:\t%s\n", v.State)
	fmt.Fprintf(w, "capacity:\t%d\n", v.Capacity)
	fmt.Fprintf(w, "active jobs:\t%d\n", v.Active)
	fmt.Fprintf(w, "queued jobs:\t%d\n", v.Queued)
	fmt.Fprintf(w, "created:\t%s\n", fmtTime(&v.Created))
	if v.Spec != nil && v.Spec.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", v.Spec.Description)
	}
}
