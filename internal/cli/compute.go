package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/api"
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
	cmd.AddCommand(create, list, show, del, a.listNodesCmd(), a.resizeCmd("resize"), a.resizeCmd("update"),
		a.instanceCmd("start", "Start a stopped compute instance"),
		a.instanceCmd("stop", "Stop a compute instance: its machine is given back until it is started"),
		a.instanceCmd("restart", "Restart a compute instance on a fresh machine"))
	return cmd
}

func (a *app) instanceCmd(action, short string) *cobra.Command {
	return &cobra.Command{
		Use:   action + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.InstanceAction(cmd.Context(), args[0], action)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
}

func (a *app) listNodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list-nodes NAME",
		Short: "List a cluster's nodes: state, size, address and what runs there",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ns, err := c.ListNodes(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(ns, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tSTATE\tSIZE\tADDRESS\tJOBS\tREASON")
				for _, n := range ns {
					jobs := strings.Join(n.Jobs, ",")
					if jobs == "" {
						jobs = "-"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, n.Size, n.Address, jobs, n.Reason)
				}
			})
		},
	}
}

// resizeCmd is `compute resize` (as Ferry names it) and `compute update`
// (as az ml does): both change a cluster's bounds live.
func (a *app) resizeCmd(use string) *cobra.Command {
	var minN, maxN, idle int
	cmd := &cobra.Command{
		Use:   use + " NAME [--min N] [--max M] [--idle-time-before-scale-down SECONDS]",
		Short: "Change a cluster's min_instances, max_instances or idle time, live",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req api.ResizeRequest
			f := cmd.Flags()
			if f.Changed("min") || f.Changed("min-instances") {
				req.MinInstances = &minN
			}
			if f.Changed("max") || f.Changed("max-instances") {
				req.MaxInstances = &maxN
			}
			if f.Changed("idle-time-before-scale-down") {
				req.IdleTimeBeforeScaleDown = &idle
			}
			if req == (api.ResizeRequest{}) {
				return fmt.Errorf("say what to change: --min, --max or --idle-time-before-scale-down")
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.ResizeCompute(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&minN, "min", 0, "min_instances")
	f.IntVar(&maxN, "max", 0, "max_instances")
	f.IntVar(&idle, "idle-time-before-scale-down", 0, "seconds a node stays idle before it is removed")
	for _, alias := range [][2]string{{"min-instances", "min"}, {"max-instances", "max"}} {
		f.IntVar(map[string]*int{"min": &minN, "max": &maxN}[alias[1]], alias[0], 0, "same as --"+alias[1])
		_ = f.MarkHidden(alias[0])
	}
	return cmd
}

func showCompute(w *tabwriter.Writer, v *workspace.Compute) {
	fmt.Fprintf(w, "name:\t%s\n", v.Name)
	fmt.Fprintf(w, "type:\t%s\n", v.Type)
	fmt.Fprintf(w, "state:\t%s\n", v.State)
	if v.Type == "local" {
		fmt.Fprintf(w, "capacity:\t%d\n", v.Capacity)
	}
	fmt.Fprintf(w, "active jobs:\t%d\n", v.Active)
	fmt.Fprintf(w, "queued jobs:\t%d\n", v.Queued)
	fmt.Fprintf(w, "created:\t%s\n", fmtTime(&v.Created))
	if v.Spec != nil && v.Spec.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", v.Spec.Description)
	}
	if v.Type == "computeinstance" && v.Spec != nil {
		fmt.Fprintf(w, "size:\t%s\n", v.Spec.Size)
		fmt.Fprintf(w, "nodes:\t%d\n", v.CurrentNodes)
		for _, e := range v.Events {
			fmt.Fprintf(w, "event %s:\t%s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
		}
	}
	if v.Spec != nil && v.Spec.MinInstances != nil && v.Spec.MaxInstances != nil {
		fmt.Fprintf(w, "size:\t%s\n", v.Spec.Size)
		fmt.Fprintf(w, "nodes:\t%d now, target %d (min %d, max %d)", v.CurrentNodes, v.TargetNodes, *v.Spec.MinInstances, *v.Spec.MaxInstances)
		for _, st := range slices.Sorted(maps.Keys(v.Nodes)) {
			fmt.Fprintf(w, ", %d %s", v.Nodes[st], st)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "idle time before scale down:\t%ds\n", *v.Spec.IdleTimeBeforeScaleDown)
		for _, e := range v.Events {
			fmt.Fprintf(w, "event %s:\t%s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
		}
	}
}
