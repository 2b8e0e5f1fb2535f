package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// batch-endpoint: `az ml batch-endpoint` with its verbs, files and flags.
// An invocation is a job (docs/batch-endpoints.md).

// batchEndpoints is the batch-endpoint command group.
var batchEndpoints = namedKind[apitypes.BatchEndpoint, *spec.BatchEndpoint]{
	group: "batch-endpoint", short: "Batch endpoints (Azure ML v2 batchEndpoint files): invoke one to score a folder of files on a cluster",
	what: "endpoint", api: client.BatchEndpoints, arg: endpointArg, parse: spec.ParseBatchEndpoint,
	show: showBatchEndpoint, table: batchEndpointTable, names: listBatchEndpointNames,
	create: &putVerb[apitypes.BatchEndpoint, *spec.BatchEndpoint]{
		verbHelp: verbHelp{"create -f FILE [--name NAME]", "Create a batch endpoint"},
		fileHelp: batchEndpointFileHelp, setHelp: batchEndpointSetHelp,
		put: (*client.Client).CreateBatchEndpoint,
	},
	update: &putVerb[apitypes.BatchEndpoint, *spec.BatchEndpoint]{
		verbHelp: verbHelp{"update -f FILE [--name NAME]", "Replace a batch endpoint's description, tags and default deployment"},
		fileHelp: batchEndpointFileHelp, setHelp: batchEndpointSetHelp,
		put: (*client.Client).UpdateBatchEndpoint,
	},
	showVerb:  verbHelp{"show NAME", "Show a batch endpoint"},
	listShort: "List batch endpoints",
	del: deleteVerb{
		verbHelp: verbHelp{"delete NAME", "Delete a batch endpoint and its deployments (its jobs are kept)"},
		yesHelp:  "accepted for az ml's sake; nothing is asked",
		done:     func(a *app, name string) { fmt.Fprintf(a.stderr, "batch endpoint %s deleted\n", name) },
	},
	more: []func(*app) *cobra.Command{(*app).batchEndpointInvokeCmd, (*app).batchEndpointListJobsCmd},
}

const (
	batchEndpointFileHelp = "batch endpoint YAML file (required)"
	batchEndpointSetHelp  = "override a field: --set path=value (repeatable)"
)

func listBatchEndpointNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	es, err := c.ListBatchEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name+"\t"+e.DefaultDeployment())
	}
	return out, nil
}

func showBatchEndpoint(w *tabwriter.Writer, e *apitypes.BatchEndpoint) {
	fmt.Fprintf(w, "name:\t%s\n", e.Name)
	if e.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", e.Description)
	}
	fmt.Fprintf(w, "provisioning_state:\t%s\n", e.ProvisioningState)
	fmt.Fprintf(w, "default deployment:\t%s\n", orDash(e.DefaultDeployment()))
	fmt.Fprintf(w, "deployments:\t%s\n", orDash(strings.Join(e.Deployments, ", ")))
	for _, k := range slices.Sorted(maps.Keys(e.Tags)) {
		fmt.Fprintf(w, "tags.%s:\t%s\n", k, e.Tags[k])
	}
	fmt.Fprintf(w, "created:\t%s\n", e.Created.Local().Format("2006-01-02 15:04:05"))
}

func batchEndpointTable(w *tabwriter.Writer, es []*apitypes.BatchEndpoint) {
	fmt.Fprintln(w, "NAME\tDEFAULT DEPLOYMENT\tDEPLOYMENTS\tCREATED")
	for _, e := range es {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", e.Name, orDash(e.DefaultDeployment()), len(e.Deployments), e.Created.Local().Format("2006-01-02 15:04:05"))
	}
}

func (a *app) batchEndpointInvokeCmd() *cobra.Command {
	var name, input, inputType, deployment, jobName string
	var stream bool
	cmd := &cobra.Command{
		Use:   "invoke NAME --input PATH|azureml:DATA:VERSION|URL [--input-type uri_folder|uri_file] [--deployment-name D] [--stream]",
		Short: "Start a batch scoring job over a file or folder: a local one is uploaded first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			n, err := endpointArg.pick(args, name)
			if err != nil {
				return err
			}
			if input == "" {
				return errors.New("--input: which files to score? a local file or folder, azureml:NAME:VERSION of a data asset, or a URL")
			}
			if inputType != "" && inputType != "uri_folder" && inputType != "uri_file" {
				return fmt.Errorf("--input-type: %q is not uri_folder or uri_file", inputType)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			// What the endpoint needs is checked before anything is sent.
			e, err := c.GetBatchEndpoint(cmd.Context(), n)
			if err != nil {
				return err
			}
			if deployment == "" && e.DefaultDeployment() == "" {
				return fmt.Errorf("batch endpoint %s has no default deployment; give --deployment-name, or make one (ferry batch-deployment create --set-default)", n)
			}
			if deployment != "" {
				if _, err := c.GetBatchDeployment(cmd.Context(), n, deployment); err != nil {
					return fmt.Errorf("--deployment-name: %w", err)
				}
			}
			inv := apitypes.BatchInvocation{Deployment: deployment, Type: inputType, JobName: jobName}
			if isRemote(input) {
				inv.Path = input
			} else {
				f := pathField{file: specFile{name: "./--input"}, field: "--input", value: input}
				st, err := os.Stat(f.path())
				if err != nil {
					return fmt.Errorf("--input: %w", err)
				}
				if inv.Type == "" {
					inv.Type = "uri_folder"
					if !st.IsDir() {
						inv.Type = "uri_file"
					}
				}
				limit, err := a.snapshotLimit("")
				if err != nil {
					return fmt.Errorf("FERRY_MAX_SNAPSHOT_SIZE: %w", err)
				}
				if inv.Snapshot, err = a.upload(cmd.Context(), c, f, inv.Type, limit, false); err != nil {
					return err
				}
			}
			j, err := c.InvokeBatchEndpoint(cmd.Context(), n, inv)
			if err != nil {
				return err
			}
			if stream {
				return a.streamToEnd(cmd.Context(), c, j.Name)
			}
			fmt.Fprintf(a.stderr, "batch job %s started (ferry job stream %s follows it; ferry job download %s gets its output)\n", j.Name, j.Name, j.Name)
			return a.print(j, func(w *tabwriter.Writer) { showJob(w, j) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&name, "name", "n", "", "endpoint name")
	f.StringVar(&input, "input", "", "the file or folder to score: a local path (uploaded), azureml:NAME:VERSION or NAME@latest of a data asset, or a URL")
	f.StringVar(&inputType, "input-type", "", "uri_folder or uri_file (default: what a local path is; uri_folder otherwise)")
	f.StringVarP(&deployment, "deployment-name", "d", "", "the deployment that scores (default: the endpoint's default)")
	f.StringVar(&jobName, "job-name", "", "the job's name (default: ENDPOINT-RANDOM)")
	f.BoolVar(&stream, "stream", false, "follow the job's log until it ends; the exit code is the job's")
	return cmd
}

func (a *app) batchEndpointListJobsCmd() *cobra.Command {
	return endpointArg.cmd(a, "list-jobs NAME", "List the jobs of a batch endpoint's invocations, newest first", func(cmd *cobra.Command, c *client.Client, n string) error {
		jobs, err := c.ListBatchJobs(cmd.Context(), n)
		if err != nil {
			return err
		}
		return a.print(jobs, func(w *tabwriter.Writer) { jobTable(w, jobs) })
	})
}
