package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// online-deployment: `az ml online-deployment` with its verbs, files and
// flags. Creating, updating and deleting wait, as az ml does, until the
// deployment is Succeeded, Failed or gone, unless --no-wait.

// deploymentPoll is how often a waiting command asks how a deployment
// stands.
const deploymentPoll = 500 * time.Millisecond

func (a *app) onlineDeploymentCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "online-deployment", Short: "Online deployments (Azure ML v2 managedOnlineDeployment files): the model, code and environment an endpoint's replicas serve"}
	cmd.AddCommand(a.deploymentCreateCmd(), a.deploymentUpdateCmd(), a.deploymentShowCmd(), a.deploymentListCmd(),
		a.deploymentDeleteCmd(), a.deploymentLogsCmd())
	for _, sub := range cmd.Commands() {
		_ = sub.RegisterFlagCompletionFunc("endpoint-name", a.complete(listEndpointNames))
		if sub.Name() != "list" && sub.Name() != "create" {
			_ = sub.RegisterFlagCompletionFunc("name", a.deploymentNames())
		}
		if sub.Name() != "create" && sub.Name() != "update" && sub.Name() != "list" {
			sub.ValidArgsFunction = firstArgWith(a.deploymentNames())
		}
	}
	return cmd
}

// deploymentNames completes the names of the deployments of the endpoint
// that --endpoint-name gives (none before it is given).
func (a *app) deploymentNames() cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		endpoint, _ := cmd.Flags().GetString("endpoint-name")
		if endpoint == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.complete(func(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
			ds, err := c.ListOnlineDeployments(ctx, endpoint)
			if err != nil {
				return nil, err
			}
			var out []string
			for _, d := range ds {
				out = append(out, d.Name+"\t"+d.ProvisioningState)
			}
			return out, nil
		})(cmd, args, toComplete)
	}
}

// onlineDeploymentArg is how the online-deployment commands name a
// deployment.
var onlineDeploymentArg = deploymentArg{
	name:         nameArg{help: "the deployment's name (or give it as the argument)", twice: deploymentNamedTwice, none: deploymentNamedNone},
	endpointHelp: "the endpoint it serves (required)",
	noEndpoint: func(name string) error {
		return fmt.Errorf("which endpoint is deployment %s of? give it: --endpoint-name ENDPOINT (or -e ENDPOINT)", name)
	},
}

// deployOpts are create's and update's flags.
type deployOpts struct {
	file, name, endpoint string
	sets                 []string
	allTraffic, noWait   bool
	local                bool // create only
}

func (a *app) deployCmd(use, short string, create bool) *cobra.Command {
	var o deployOpts
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if len(args) == 1 {
				n, err := onlineDeploymentArg.name.pick(args, o.name)
				if err != nil {
					return err
				}
				o.name = n
			}
			if o.allTraffic && o.noWait {
				return errors.New("--all-traffic moves the endpoint's traffic once the deployment is Succeeded, which --no-wait does not wait for; leave one out (later: ferry online-endpoint update --name ENDPOINT --traffic \"DEPLOYMENT=100\")")
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return a.deploy(cmd.Context(), c, o, create)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "online deployment YAML file (required)")
	f.StringVarP(&o.name, "name", "n", "", "deployment name (default: the file's)")
	f.StringVarP(&o.endpoint, "endpoint-name", "e", "", "the endpoint it serves (default: the file's endpoint_name)")
	f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set instance_count=2")
	f.BoolVar(&o.allTraffic, "all-traffic", false, "once it is Succeeded, send all of the endpoint's traffic to it")
	f.BoolVar(&o.noWait, "no-wait", false, "return at once instead of waiting until it is Succeeded or Failed")
	if create {
		f.BoolVar(&o.local, "local", false, "run its one replica on the server's machine (the local target) instead of nodes of its instance_type")
	}
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) deploymentCreateCmd() *cobra.Command {
	return a.deployCmd("create -f FILE [--name NAME] [--endpoint-name ENDPOINT] [--all-traffic] [--local] [--no-wait]",
		"Create an online deployment and wait until its replicas are ready (Succeeded) or one fails (Failed)", true)
}

func (a *app) deploymentUpdateCmd() *cobra.Command {
	return a.deployCmd("update -f FILE [--name NAME] [--endpoint-name ENDPOINT] [--all-traffic] [--no-wait]",
		"Change an online deployment and wait until the change is rolled out: new replicas start beside the old, which stop once every new one is ready", false)
}

// deploy parses a deployment file, checks what it can before uploading
// anything (its paths, its endpoint, its registered model), uploads its
// code, inline model and environment files, creates or updates it, and
// waits for the outcome unless o.noWait.
func (a *app) deploy(ctx context.Context, c *client.Client, o deployOpts, create bool) error {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return err
	}
	sets := o.sets
	if o.name != "" {
		sets = append(sets, "name="+o.name)
	}
	if o.endpoint != "" {
		sets = append(sets, "endpoint_name="+o.endpoint)
	}
	d, err := spec.ParseOnlineDeployment(data, sets)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	src := specFile{name: o.file, data: data, sets: o.sets}
	env, envSrc, envField, err := inlineEnvironmentFile(src, d.Environment)
	if err != nil {
		return err
	}
	d.Environment = env
	local := o.local
	if !create {
		old, err := c.GetOnlineDeployment(ctx, d.EndpointName, d.Name)
		if err != nil {
			return err
		}
		local = old.Local
	}
	files, err := checkDeploymentFiles(src, d.CodeConfiguration, d.Model, d.Environment, envSrc, envField)
	if err != nil {
		return err
	}
	if err := a.checkDeploymentRefs(ctx, c, d, src, o.endpoint != "", local); err != nil {
		return err
	}
	up, err := files.upload(ctx, a, c)
	if err != nil {
		return err
	}
	var v *apitypes.OnlineDeployment
	if create {
		v, err = c.CreateOnlineDeployment(ctx, d, up, local)
	} else {
		v, err = c.UpdateOnlineDeployment(ctx, d, up)
	}
	if err != nil {
		return err
	}
	if o.noWait {
		fmt.Fprintf(a.stderr, "deployment %s of endpoint %s: %s; not waiting (ferry online-deployment show -n %s -e %s)\n", v.Name, v.EndpointName, v.ProvisioningState, v.Name, v.EndpointName)
		return a.print(v, func(w *tabwriter.Writer) { showDeployment(w, v) })
	}
	v, err = a.waitDeployment(ctx, c, d.EndpointName, d.Name, false)
	if err != nil {
		return err
	}
	if v.ProvisioningState == apitypes.DeploymentFailed {
		fmt.Fprintf(a.stderr, "deployment %s failed: %s\n(ferry online-deployment get-logs -n %s -e %s shows its replicas' logs)\n", v.Name, v.Reason, v.Name, v.EndpointName)
		return &exitError{code: 1}
	}
	if o.allTraffic {
		if _, err := c.UpdateOnlineEndpoint(ctx, v.EndpointName, apitypes.EndpointUpdate{Traffic: map[string]int{v.Name: 100}}); err != nil {
			return fmt.Errorf("deployment %s is Succeeded, but its endpoint's traffic was not moved to it: %w", v.Name, err)
		}
		fmt.Fprintf(a.stderr, "endpoint %s: traffic %s=100\n", v.EndpointName, v.Name)
	}
	return a.print(v, func(w *tabwriter.Writer) { showDeployment(w, v) })
}

// checkDeploymentRefs asks the workspace about what the deployment refers
// to (its endpoint, its registered model) before anything is uploaded:
// a name mistyped should not cost an upload of the code.
func (a *app) checkDeploymentRefs(ctx context.Context, c *client.Client, d *spec.OnlineDeployment, src specFile, endpointFlag, local bool) error {
	e, err := c.GetOnlineEndpoint(ctx, d.EndpointName)
	if client.StatusOf(err) == 404 {
		msg := fmt.Sprintf("endpoint %s does not exist; create it first (ferry online-endpoint create -f ENDPOINT.yml) or name another", d.EndpointName)
		if endpointFlag {
			return errors.New("--endpoint-name: " + msg)
		}
		return pathField{file: src, field: "endpoint_name", value: d.EndpointName}.errorf("%s", msg)
	} else if err != nil {
		return err
	}
	// Pool nodes need a size; on the endpoint's kubernetes compute the
	// instance type is the compute's (its default when left out).
	onCluster := e.Compute != "" && d.SchemaKind() != "managed"
	if !local && !onCluster && d.InstanceType == "" {
		return fmt.Errorf("%s: instance_type: is required: the size of the nodes its replicas run on (ferry size list); or pass --local to run one replica on this machine", src.name)
	}
	if d.Model == nil || d.Model.Ref == "" {
		return nil
	}
	name, version, latest, ok := d.Model.RefParts()
	if !ok {
		return nil // the parser checked it; the server says what is wrong
	}
	if latest {
		version = "latest"
	}
	if _, err := c.GetModel(ctx, name, version); client.StatusOf(err) == 404 {
		return pathField{file: src, field: "model", value: d.Model.Ref}.errorf("%s (ferry model list shows the registered models)", err)
	} else if err != nil {
		return err
	}
	return nil
}

// waitDeployment polls a deployment until it is Succeeded or Failed, or,
// with gone, until it no longer exists (it returns nil then). Each change
// of its state or its replicas' is a line on stderr. Ctrl-C stops waiting,
// not the deployment.
func (a *app) waitDeployment(ctx context.Context, c *client.Client, endpoint, name string, gone bool) (*apitypes.OnlineDeployment, error) {
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	last := ""
	for {
		v, err := c.GetOnlineDeployment(sctx, endpoint, name)
		switch {
		case gone && client.StatusOf(err) == 404:
			fmt.Fprintf(a.stderr, "deployment %s: deleted\n", name)
			return nil, nil
		case sctx.Err() != nil:
			fmt.Fprintf(a.stderr, "\nstopped waiting; deployment %s goes on (ferry online-deployment show -n %s -e %s)\n", name, name, endpoint)
			return nil, &exitError{code: 130}
		case client.StatusOf(err) >= 400:
			return nil, err
		case err == nil:
			if line := progressOf(v); line != last {
				fmt.Fprintf(a.stderr, "deployment %s: %s\n", name, line)
				last = line
			}
			if !gone && (v.ProvisioningState == apitypes.DeploymentSucceeded || v.ProvisioningState == apitypes.DeploymentFailed) {
				return v, nil
			}
		}
		// A server that does not answer for a while (a restart) is waited
		// for, as job streams wait for it.
		select {
		case <-sctx.Done():
		case <-time.After(deploymentPoll):
		}
	}
}

// progressOf is a deployment's state and its replicas' in one line.
func progressOf(v *apitypes.OnlineDeployment) string {
	var b strings.Builder
	b.WriteString(v.ProvisioningState)
	for _, r := range v.Replicas {
		fmt.Fprintf(&b, "; replica %s %s (job %s", r.Job, r.State, dash(r.JobStatus))
		if r.Reason != "" {
			b.WriteString(": " + r.Reason)
		}
		b.WriteString(")")
	}
	return b.String()
}

// namedDeploymentCmd is a command about one online deployment, named
// as onlineDeploymentArg reads it once -o is checked.
func (a *app) namedDeploymentCmd(use, short string, run func(cmd *cobra.Command, c *client.Client, endpoint, name string) error) *cobra.Command {
	return a.outputFirst(onlineDeploymentArg.cmd(a, use, short, run))
}

func (a *app) deploymentShowCmd() *cobra.Command {
	return a.namedDeploymentCmd("show [NAME] --endpoint-name ENDPOINT", "Show an online deployment: its state, why it failed, where it runs and its replicas",
		func(cmd *cobra.Command, c *client.Client, endpoint, name string) error {
			v, err := c.GetOnlineDeployment(cmd.Context(), endpoint, name)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showDeployment(w, v) })
		})
}

func (a *app) deploymentListCmd() *cobra.Command {
	var endpoint string
	cmd := &cobra.Command{
		Use:   "list --endpoint-name ENDPOINT",
		Short: "List an online endpoint's deployments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]*apitypes.OnlineDeployment, error) {
				return c.ListOnlineDeployments(cmd.Context(), endpoint)
			}, deploymentTable)
		},
	}
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", "the endpoint whose deployments to list (required)")
	_ = cmd.MarkFlagRequired("endpoint-name")
	return a.outputFirst(cmd)
}

func deploymentTable(w *tabwriter.Writer, ds []*apitypes.OnlineDeployment) {
	fmt.Fprintln(w, "NAME\tSTATE\tCOMPUTE\tMODEL\tREPLICAS\tREADY")
	for _, d := range ds {
		ready := 0
		for _, r := range d.Replicas {
			if r.State == "Ready" {
				ready++
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\n", d.Name, d.ProvisioningState, d.Compute, modelOf(d), len(d.Replicas), ready)
	}
}

func (a *app) deploymentDeleteCmd() *cobra.Command {
	var noWait, yes bool
	cmd := a.namedDeploymentCmd("delete [NAME] --endpoint-name ENDPOINT [--no-wait]", "Delete an online deployment that takes no live traffic and wait until its replicas stopped and it is gone",
		func(cmd *cobra.Command, c *client.Client, endpoint, name string) error {
			if err := c.DeleteOnlineDeployment(cmd.Context(), endpoint, name); err != nil {
				return err
			}
			if noWait {
				fmt.Fprintf(a.stdout, "deleting online deployment %s of endpoint %s (its replicas stop, then it is gone)\n", name, endpoint)
				return nil
			}
			if _, err := a.waitDeployment(cmd.Context(), c, endpoint, name, true); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "deleted online deployment %s of endpoint %s\n", name, endpoint)
			return nil
		})
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once it is Deleting instead of waiting until it is gone")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask (ferry never asks; accepted as az ml takes it)")
	return cmd
}

func (a *app) deploymentLogsCmd() *cobra.Command {
	var lines int
	cmd := a.namedDeploymentCmd("get-logs [NAME] --endpoint-name ENDPOINT [--lines N]", "Print the end of each replica's log (ferry job stream REPLICA follows one)",
		func(cmd *cobra.Command, c *client.Client, endpoint, name string) error {
			return c.DeploymentLogs(cmd.Context(), endpoint, name, lines, a.stdout)
		})
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if lines < 0 {
			return fmt.Errorf("--lines: %d is not a number of lines (0 or more)", lines)
		}
		return nil
	}
	cmd.Flags().IntVarP(&lines, "lines", "l", 0, "the last N lines of each replica's log (0: all)")
	return cmd
}

func modelOf(d *apitypes.OnlineDeployment) string {
	switch {
	case d.ModelID != "":
		return d.ModelID
	case d.Model != nil && d.Model.Path != "":
		return "inline (" + d.Model.Path + ")"
	}
	return "-"
}

func showDeployment(w *tabwriter.Writer, d *apitypes.OnlineDeployment) {
	fmt.Fprintf(w, "name:\t%s\n", d.Name)
	fmt.Fprintf(w, "endpoint_name:\t%s\n", d.EndpointName)
	fmt.Fprintf(w, "provisioning_state:\t%s\n", d.ProvisioningState)
	if d.Reason != "" {
		fmt.Fprintf(w, "reason:\t%s\n", strings.ReplaceAll(strings.TrimRight(d.Reason, "\n"), "\n", "\n\t"))
	}
	compute := d.Compute
	if d.Local {
		compute += " (--local)"
	}
	fmt.Fprintf(w, "compute:\t%s\n", compute)
	fmt.Fprintf(w, "model:\t%s\n", modelOf(d))
	if c := d.CodeConfiguration; c != nil {
		fmt.Fprintf(w, "scoring_script:\t%s (in %s)\n", c.ScoringScript, c.Code)
	}
	fmt.Fprintf(w, "instance_type:\t%s\n", dash(d.InstanceType))
	fmt.Fprintf(w, "instance_count:\t%d\n", d.InstanceCount)
	if s := d.ScaleSettings; s != nil && s.Type == "target_utilization" && s.MinInstances != nil {
		fmt.Fprintf(w, "scale_settings:\ttarget_utilization %d%%, %d to %d replicas\n", s.TargetUtilizationPercentage, *s.MinInstances, s.MaxInstances)
	}
	if s := d.Stats; s != nil {
		fmt.Fprintf(w, "requests:\t%d (%d errors), p50 %.1f ms, p99 %.1f ms\n", s.Requests, s.Errors, s.P50MS, s.P99MS)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Tags)) {
		fmt.Fprintf(w, "tags.%s:\t%s\n", k, d.Tags[k])
	}
	fmt.Fprintf(w, "created:\t%s\n", d.Created.Local().Format("2006-01-02 15:04:05"))
	if len(d.Replicas) == 0 {
		fmt.Fprintf(w, "replicas:\tnone\n")
		return
	}
	fmt.Fprintln(w, "\nREPLICA JOB\tGENERATION\tSTATE\tADDRESS\tJOB STATUS")
	for _, r := range d.Replicas {
		status := dash(r.JobStatus)
		if r.Reason != "" {
			status += " (" + r.Reason + ")"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", r.Job, r.Generation, r.State, dash(r.Address), status)
	}
}
