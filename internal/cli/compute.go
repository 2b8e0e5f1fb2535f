package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/server"
	"github.com/ferry-ml/ferry/internal/spec"
)

// viewEvents is how many of its newest events a compute's view carries;
// `compute show --events` asks for more.
const viewEvents = 10

func jsonOf(v any) (json.RawMessage, error) { return json.Marshal(v) }

func (a *app) computeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "compute", Short: "Manage compute targets (Azure ML v2 compute files)"}
	create := a.createComputeCmd("create -f FILE", "Create a compute target from a compute YAML file")
	attach := a.createComputeCmd("attach -f FILE", "Attach an existing machine over SSH, a Slurm cluster or a Kubernetes cluster (a virtualmachine, slurm or kubernetes compute file); same as create")
	list := &cobra.Command{
		Use:   "list",
		Short: "List compute targets",
		Long: `List compute targets.

SIZE is a pool's node size. NODES is now/min/max: the nodes a cluster,
instance or attached machine has now and the bounds the count is kept in
(a cluster's min_instances and max_instances; 1/1 for an instance meant
to run and for an attached machine). CAPACITY is how many jobs can run at
once: the local target's attempts at once, a pool's max nodes (a job
there takes whole nodes).`,
		Args: cobra.NoArgs,
		RunE: listRun(a, (*client.Client).ListComputes, listComputes),
	}
	var events int
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a compute target, with its newest events (--events)",
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
			if events <= 0 || events > viewEvents {
				if v.Events, err = c.ComputeEvents(cmd.Context(), args[0]); err != nil {
					return err
				}
			}
			if events > 0 && len(v.Events) > events {
				v.Events = v.Events[len(v.Events)-events:]
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
	show.Flags().IntVar(&events, "events", viewEvents, "how many of the newest events to show; 0 shows every one")
	del := a.deleteComputeCmd("delete NAME", "Delete a compute target that has no unfinished jobs; a cluster's or attached machine's nodes are given back first")
	detach := a.deleteComputeCmd("detach NAME", "Detach an attached machine: stop its agent and remove what Ferry put there; same as delete")
	cmd.AddCommand(create, attach, list, show, del, detach, a.listNodesCmd(), a.resizeCmd("resize"), a.resizeCmd("update"),
		a.instanceCmd("start", "Start a stopped compute instance"),
		a.instanceCmd("stop", "Stop a compute instance: its machine is given back until it is started"),
		a.instanceCmd("restart", "Restart a compute instance on a fresh machine"), a.preemptNodeCmd())
	cmd.AddCommand(a.sessionCmds()...)
	return cmd
}

func (a *app) instanceCmd(action, short string) *cobra.Command {
	var noWait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   action + " NAME",
		Short: short + "; waits until it is done unless --no-wait",
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
			if !noWait {
				fmt.Fprintf(a.stderr, "%s: waiting until it is %s (Ctrl-C stops waiting, not the %s)\n", args[0], instanceGoal(action), action)
				if v, err = a.waitInstance(cmd.Context(), c, args[0], action, timeout); err != nil {
					return err
				}
			}
			return a.print(v, func(w *tabwriter.Writer) { showCompute(w, v) })
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the "+action+" is asked for, without waiting for it to be done")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "how long to wait before giving up waiting (the "+action+" goes on)")
	return cmd
}

// instanceGoal is the state an instance action ends in.
func instanceGoal(action string) string {
	if action == "stop" {
		return "Stopped"
	}
	return "Running with its node ready"
}

// waitInstance waits until an instance action is done, as `az ml compute
// start|stop|restart` do: Stopped, or Running with a node that has joined.
// The server says Running only once a node other than those a restart
// gives back has joined; the node count is checked too, so that a server
// from before that rule is waited for as well. It fails when the instance
// ends in a state it will not leave by itself.
func (a *app) waitInstance(ctx context.Context, c *client.Client, name, action string, timeout time.Duration) (*apitypes.Compute, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := c.GetCompute(ctx, name)
		if err != nil {
			return nil, err
		}
		switch {
		case action == "stop" && v.State == "Stopped":
			return v, nil
		case action != "stop" && (v.State == "Running" || v.State == "JobRunning") && v.Nodes["Idle"]+v.Nodes["Busy"] > 0:
			return v, nil
		case v.State == "SetupFailed" || v.State == "Failed":
			return v, fmt.Errorf("compute %s is %s; `%s compute show %s --events 0` has the reason in its events", name, v.State, a.self, name)
		case time.Now().After(deadline):
			return v, fmt.Errorf("compute %s is still %s after %s; the %s goes on (see `%s compute show %s`)", name, v.State, timeout, action, a.self, name)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (a *app) preemptNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "preempt-node NAME NODE",
		Short: "Preempt a node of a low-priority cluster now, as its cloud would (owners only): its jobs stop, keep their outputs and run again as a new attempt",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*apitypes.Node, error) {
				return c.PreemptNode(cmd.Context(), args[0], args[1])
			}, func(w *tabwriter.Writer, n *apitypes.Node) {
				fmt.Fprintf(w, "node:\t%s\nstate:\t%s\nreason:\t%s\njobs:\t%s\n", n.Name, n.State, n.Reason, strings.Join(n.Jobs, ", "))
			})
		},
	}
}

func (a *app) listNodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list-nodes NAME",
		Short: "List a cluster's nodes: state, size, address and what runs there",
		Args:  cobra.ExactArgs(1),
		RunE:  nameRun(a, (*client.Client).ListNodes, nodeTable),
	}
}

func nodeTable(w *tabwriter.Writer, ns []*apitypes.Node) {
	fmt.Fprintln(w, "NAME\tSTATE\tSIZE\tADDRESS\tJOBS\tREASON")
	for _, n := range ns {
		jobs := strings.Join(n.Jobs, ",")
		if jobs == "" {
			jobs = "-"
		}
		reason := n.Reason
		if n.Warning != "" {
			reason += "; warning: " + n.Warning
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, n.Size, n.Address, jobs, reason)
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
			var req apitypes.ResizeRequest
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
			if req == (apitypes.ResizeRequest{}) {
				return fmt.Errorf("say what to change: --min, --max or --idle-time-before-scale-down")
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*apitypes.Compute, error) {
				return c.ResizeCompute(cmd.Context(), args[0], req)
			}, showCompute)
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

// listComputes is the table of `compute list`.
func listComputes(w *tabwriter.Writer, vs []*apitypes.Compute) {
	fmt.Fprintln(w, "NAME\tTYPE\tSTATE\tSIZE\tNODES\tCAPACITY\tACTIVE\tQUEUED")
	for _, v := range vs {
		size, nodes := "-", "-"
		if v.Size != "" {
			size = v.Size
		}
		if v.MinNodes != nil && v.MaxNodes != nil {
			nodes = fmt.Sprintf("%d/%d/%d", v.CurrentNodes, *v.MinNodes, *v.MaxNodes)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", v.Name, v.Type, v.State, size, nodes, v.Capacity, v.Active, v.Queued)
	}
}

func showCompute(w *tabwriter.Writer, v *apitypes.Compute) {
	pt := server.PoolType(v.Type)
	fmt.Fprintf(w, "name:\t%s\n", v.Name)
	fmt.Fprintf(w, "type:\t%s\n", v.Type)
	fmt.Fprintf(w, "state:\t%s\n", v.State)
	fmt.Fprintf(w, "capacity:\t%d jobs at once\n", v.Capacity)
	for _, warn := range v.Warnings {
		fmt.Fprintf(w, "warning:\t%s\n", warn)
	}
	fmt.Fprintf(w, "active jobs:\t%d\n", v.Active)
	fmt.Fprintf(w, "queued jobs:\t%d\n", v.Queued)
	fmt.Fprintf(w, "created:\t%s\n", fmtTime(&v.Created))
	if v.Spec != nil && v.Spec.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", v.Spec.Description)
	}
	if pt != nil && pt.Attached && v.Spec != nil {
		addr := v.Spec.Address
		if s := v.Spec.SSHSettings; s != nil {
			addr = fmt.Sprintf("%s@%s port %d", s.AdminUsername, addr, s.SSHPort)
		}
		fmt.Fprintf(w, "address:\t%s\n", addr)
		fmt.Fprintf(w, "host key:\t%s\n", v.Spec.HostKey)
		nodes := fmt.Sprintf("%d", v.CurrentNodes)
		for _, st := range slices.Sorted(maps.Keys(v.Nodes)) {
			nodes += fmt.Sprintf(", %d %s", v.Nodes[st], st)
		}
		fmt.Fprintf(w, "nodes:\t%s\n", nodes)
		for _, e := range v.Events {
			fmt.Fprintf(w, "event %s:\t%s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
		}
	}
	if pt != nil && pt.Instance && v.Spec != nil {
		fmt.Fprintf(w, "size:\t%s\n", v.Spec.Size)
		if id, ok := v.Spec.CreateOnBehalfOf["user_object_id"].(string); ok {
			fmt.Fprintf(w, "made for:\t%s\n", id)
		}
		fmt.Fprintf(w, "nodes:\t%d\n", v.CurrentNodes)
		fmt.Fprintf(w, "open sessions:\t%d, port-forwards %d\n", v.Sessions, v.PortForwards)
		for _, e := range v.Events {
			fmt.Fprintf(w, "event %s:\t%s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
		}
	}
	if v.Spec != nil && v.Type == "kubernetes" {
		showKubernetes(w, v.Spec)
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

// showKubernetes shows a Kubernetes compute's namespace, default image
// and instance types (its kubeconfig is never shown).
func showKubernetes(w *tabwriter.Writer, c *spec.Compute) {
	fmt.Fprintf(w, "namespace:\t%s\n", c.Namespace)
	if c.ResourceID != "" {
		fmt.Fprintf(w, "resource id:\t%s\n", c.ResourceID)
	}
	if c.Image != "" {
		fmt.Fprintf(w, "default image:\t%s\n", c.Image)
	}
	quantities := func(m map[string]string) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, k+"="+m[k])
		}
		return strings.Join(parts, ",")
	}
	types := c.AllInstanceTypes()
	for _, name := range slices.Sorted(maps.Keys(types)) {
		it := types[name]
		line := name
		if name == c.DefaultInstanceType {
			line += " (default)"
		}
		if _, ok := c.InstanceTypes[name]; !ok {
			line += " (the cluster's InstanceType)"
		}
		if q := quantities(it.Resources.Requests); q != "" {
			line += " requests " + q
		}
		if q := quantities(it.Resources.Limits); q != "" {
			line += " limits " + q
		}
		if q := quantities(it.NodeSelector); q != "" {
			line += " nodeSelector " + q
		}
		if n := len(it.Tolerations); n > 0 {
			line += fmt.Sprintf(" tolerations %d", n)
		}
		fmt.Fprintf(w, "instance type:\t%s\n", line)
	}
}

func (a *app) createComputeCmd(use, short string) *cobra.Command {
	var file string
	var sets []string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			s, err := spec.ParseComputeWithSet(data, sets)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if err := readNamedFiles(file, s); err != nil {
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
	cmd.Flags().StringVarP(&file, "file", "f", "", "compute YAML file (required)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set max_instances=4 --set name=cpu-2")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// readNamedFiles reads the files a compute file names (a Kubernetes
// compute's kubeconfig, an attached machine's
// ssh_settings.ssh_private_key_file, a fleet's
// provider.ssh_settings.ssh_private_key_file, an instance's setup script
// paths) and sends their content: the server never reads files named by a
// request. Relative paths are relative to the compute file, and ~ (for
// keys) is the user's home.
func readNamedFiles(file string, s *spec.Compute) error {
	read := func(field, p string) (string, error) {
		if strings.HasPrefix(p, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("%s: %w", field, err)
			}
			p = filepath.Join(home, p[2:])
		} else if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(file), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			what := "the private key"
			if field == "kubeconfig" {
				what = "the kubeconfig"
			}
			return "", fmt.Errorf("%s: cannot read %s: %w", field, what, err)
		}
		return string(b), nil
	}
	if st := s.SSHSettings; st != nil && st.SSHPrivateKeyFile != "" && st.SSHPrivateKey == "" {
		k, err := read("ssh_settings.ssh_private_key_file", st.SSHPrivateKeyFile)
		if err != nil {
			return err
		}
		st.SSHPrivateKey = k
	}
	if s.Kubeconfig != "" && s.KubeconfigContent == "" {
		k, err := read("kubeconfig", s.Kubeconfig)
		if err != nil {
			return err
		}
		s.KubeconfigContent = k
	}
	for _, k := range []string{"creation_script", "startup_script"} {
		m, _ := s.SetupScripts[k].(map[string]any)
		if p, _ := m["path"].(string); p != "" {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(file), filepath.FromSlash(p)))
			if err != nil {
				return fmt.Errorf("setup_scripts.%s.path: %w (the path is relative to the compute file)", k, err)
			}
			m["content"] = string(b)
		}
	}
	if m, ok := s.Provider["ssh_settings"].(map[string]any); ok {
		if p, ok := m["ssh_private_key_file"].(string); ok && p != "" {
			k, err := read("provider.ssh_settings.ssh_private_key_file", p)
			if err != nil {
				return err
			}
			m["ssh_private_key"] = k
		}
	}
	return nil
}

func (a *app) deleteComputeCmd(use, short string) *cobra.Command {
	var noWait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			if err := c.DeleteCompute(ctx, args[0]); err != nil {
				return err
			}
			if noWait {
				fmt.Fprintf(a.stderr, "deleting compute %s\n", args[0])
				return nil
			}
			deadline := time.Now().Add(timeout)
			for {
				v, err := c.GetCompute(ctx, args[0])
				if client.StatusOf(err) == http.StatusNotFound {
					fmt.Fprintf(a.stderr, "deleted compute %s\n", args[0])
					return nil
				}
				if err != nil {
					return err
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("compute %s is still %s after %s; see `%s compute show %s` for why", args[0], v.State, timeout, a.self, args[0])
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once deletion has begun")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the compute's machines to be given back")
	return cmd
}
