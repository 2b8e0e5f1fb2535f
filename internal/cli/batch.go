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
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// batch-endpoint and batch-deployment: `az ml batch-endpoint` and
// `az ml batch-deployment` with their verbs, files and flags. An
// invocation is a job (docs/batch-endpoints.md).

func (a *app) batchEndpointCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "batch-endpoint", Short: "Batch endpoints (Azure ML v2 batchEndpoint files): invoke one to score a folder of files on a cluster"}
	cmd.AddCommand(a.batchEndpointPutCmd(true), a.batchEndpointPutCmd(false), a.batchEndpointShowCmd(), a.batchEndpointListCmd(),
		a.batchEndpointDeleteCmd(), a.batchEndpointInvokeCmd(), a.batchEndpointListJobsCmd())
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(listBatchEndpointNames)
			_ = sub.RegisterFlagCompletionFunc("name", a.complete(listBatchEndpointNames))
		}
	}
	return cmd
}

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

func (a *app) batchDeploymentCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "batch-deployment", Short: "Batch deployments (Azure ML v2 modelBatchDeployment files): the scoring script, model, environment and compute of a batch endpoint's jobs"}
	cmd.AddCommand(a.batchDeploymentPutCmd(true), a.batchDeploymentPutCmd(false), a.batchDeploymentShowCmd(), a.batchDeploymentListCmd(), a.batchDeploymentDeleteCmd())
	for _, sub := range cmd.Commands() {
		_ = sub.RegisterFlagCompletionFunc("endpoint-name", a.complete(listBatchEndpointNames))
	}
	return cmd
}

func (a *app) batchEndpointPutCmd(create bool) *cobra.Command {
	var file, name string
	var sets []string
	use, short := "create -f FILE [--name NAME]", "Create a batch endpoint"
	if !create {
		use, short = "update -f FILE [--name NAME]", "Replace a batch endpoint's description, tags and default deployment"
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if len(args) == 1 {
				n, err := endpointName(args, name)
				if err != nil {
					return err
				}
				name = n
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			if name != "" {
				sets = append(sets, "name="+name)
			}
			e, err := spec.ParseBatchEndpoint(data, sets)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			var v *apitypes.BatchEndpoint
			if create {
				v, err = c.CreateBatchEndpoint(cmd.Context(), e)
			} else {
				v, err = c.UpdateBatchEndpoint(cmd.Context(), e)
			}
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showBatchEndpoint(w, v) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "batch endpoint YAML file (required)")
	f.StringVarP(&name, "name", "n", "", "endpoint name (default: the file's)")
	f.StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
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

func (a *app) batchEndpointShowCmd() *cobra.Command {
	return a.namedEndpointCmd("show NAME", "Show a batch endpoint", func(cmd *cobra.Command, c *client.Client, n string) error {
		v, err := c.GetBatchEndpoint(cmd.Context(), n)
		if err != nil {
			return err
		}
		return a.print(v, func(w *tabwriter.Writer) { showBatchEndpoint(w, v) })
	})
}

func (a *app) batchEndpointListCmd() *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List batch endpoints", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			es, err := c.ListBatchEndpoints(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(es, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tDEFAULT DEPLOYMENT\tDEPLOYMENTS\tCREATED")
				for _, e := range es {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", e.Name, orDash(e.DefaultDeployment()), len(e.Deployments), e.Created.Local().Format("2006-01-02 15:04:05"))
				}
			})
		},
	}
}

func (a *app) batchEndpointDeleteCmd() *cobra.Command {
	var yes bool
	cmd := a.namedEndpointCmd("delete NAME", "Delete a batch endpoint and its deployments (its jobs are kept)", func(cmd *cobra.Command, c *client.Client, n string) error {
		if err := c.DeleteBatchEndpoint(cmd.Context(), n); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "batch endpoint %s deleted\n", n)
		return nil
	})
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "accepted for az ml's sake; nothing is asked")
	return cmd
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
			n, err := endpointName(args, name)
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
	return a.namedEndpointCmd("list-jobs NAME", "List the jobs of a batch endpoint's invocations, newest first", func(cmd *cobra.Command, c *client.Client, n string) error {
		jobs, err := c.ListBatchJobs(cmd.Context(), n)
		if err != nil {
			return err
		}
		return a.print(jobs, func(w *tabwriter.Writer) { jobTable(w, jobs) })
	})
}

// batchDeploymentPutCmd is create and update: both parse the file, check
// what it refers to, upload its code, inline model and environment files,
// and store it.
func (a *app) batchDeploymentPutCmd(create bool) *cobra.Command {
	var file, name, endpoint string
	var sets []string
	var setDefault bool
	use, short := "create -f FILE [--name NAME] [--endpoint-name ENDPOINT] [--set-default]", "Create a batch deployment (an endpoint's first becomes its default)"
	if !create {
		use, short = "update -f FILE [--name NAME] [--endpoint-name ENDPOINT] [--set-default]", "Replace a batch deployment; jobs already started keep what they had"
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if len(args) == 1 {
				n, err := deploymentName(args, name)
				if err != nil {
					return err
				}
				name = n
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			all := sets
			if name != "" {
				all = append(all, "name="+name)
			}
			if endpoint != "" {
				all = append(all, "endpoint_name="+endpoint)
			}
			d, err := spec.ParseBatchDeployment(data, all)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return a.putBatchDeployment(cmd.Context(), c, specFile{name: file, data: data, sets: sets}, d, setDefault, create)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "batch deployment YAML file (required)")
	f.StringVarP(&name, "name", "n", "", "deployment name (default: the file's)")
	f.StringVarP(&endpoint, "endpoint-name", "e", "", "its batch endpoint (default: the file's endpoint_name)")
	f.StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set resources.instance_count=2")
	f.BoolVar(&setDefault, "set-default", false, "make it the endpoint's default deployment")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) putBatchDeployment(ctx context.Context, c *client.Client, src specFile, d *spec.BatchDeployment, setDefault, create bool) error {
	env, envSrc, envField, err := inlineEnvironmentFile(src, d.Environment)
	if err != nil {
		return err
	}
	d.Environment = env
	var paths []pathField
	var code *pathField
	if d.CodeConfiguration != nil {
		code = &pathField{file: src, field: "code_configuration.code", value: d.CodeConfiguration.Code}
		paths = append(paths, *code)
	}
	var model *pathField
	if m := d.Model; m != nil && m.Ref == "" {
		model = &pathField{file: src, field: "model.path", value: m.Path}
		paths = append(paths, *model)
	}
	if p, field := environment.ContextPath(d.Environment); p != "" && d.Environment.Ref == "" {
		paths = append(paths, pathField{file: envSrc, field: envField + field, value: p})
	}
	for _, f := range paths {
		if isRemote(f.value) {
			return f.errorf("%q is not a local path; ferry uploads the local file or folder it names", f.value)
		}
		if _, err := os.Stat(f.path()); errors.Is(err, os.ErrNotExist) {
			return f.notFound()
		}
	}
	// The endpoint, the compute and a registered model are checked before
	// anything is uploaded.
	if _, err := c.GetBatchEndpoint(ctx, d.EndpointName); err != nil {
		return pathField{file: src, field: "endpoint_name", value: d.EndpointName}.errorf("%v", err)
	}
	if _, err := c.GetCompute(ctx, d.ComputeName()); err != nil {
		return pathField{file: src, field: "compute", value: d.Compute}.errorf("%v", err)
	}
	if m := d.Model; m != nil && m.Ref != "" {
		mname, version, err := spec.ParseModelRef(m.Ref)
		if err == nil {
			_, err = c.GetModel(ctx, mname, version)
		}
		if err != nil {
			return pathField{file: src, field: "model", value: m.Ref}.errorf("%v", err)
		}
	}
	limit, err := a.snapshotLimit("")
	if err != nil {
		return fmt.Errorf("FERRY_MAX_SNAPSHOT_SIZE: %w", err)
	}
	var up apitypes.DeploymentUploads
	if code != nil {
		if up.CodeSnapshot, err = a.upload(ctx, c, *code, "", limit, true); err != nil {
			return err
		}
	}
	if model != nil {
		if up.ModelSnapshot, err = a.upload(ctx, c, *model, "", limit, false); err != nil {
			return err
		}
	}
	if up.EnvironmentSnapshot, err = a.uploadEnvironmentFiles(ctx, c, envField, envSrc, d.Environment, limit); err != nil {
		return err
	}
	v, err := c.PutBatchDeployment(ctx, d, up, setDefault, create)
	if err != nil {
		return err
	}
	return a.print(v, func(w *tabwriter.Writer) { showBatchDeployment(w, v) })
}

func showBatchDeployment(w *tabwriter.Writer, d *apitypes.BatchDeployment) {
	fmt.Fprintf(w, "name:\t%s\n", d.Name)
	fmt.Fprintf(w, "endpoint_name:\t%s\n", d.EndpointName)
	fmt.Fprintf(w, "default:\t%t\n", d.Default)
	fmt.Fprintf(w, "compute:\t%s\n", d.ComputeName())
	switch m := d.Model; {
	case d.ModelID != "":
		fmt.Fprintf(w, "model:\t%s\n", d.ModelID)
	case m != nil:
		fmt.Fprintf(w, "model:\t%s (inline)\n", m.Path)
	default:
		fmt.Fprintf(w, "model:\t-\n")
	}
	if c := d.CodeConfiguration; c != nil {
		fmt.Fprintf(w, "scoring_script:\t%s (in %s)\n", c.ScoringScript, c.Code)
	} else {
		fmt.Fprintf(w, "scoring_script:\tnone: Ferry's MLflow scoring (mlflow.pyfunc)\n")
	}
	fmt.Fprintf(w, "instance_count:\t%d\n", d.Resources.InstanceCount)
	fmt.Fprintf(w, "max_concurrency_per_instance:\t%d\n", d.MaxConcurrencyPerInstance)
	fmt.Fprintf(w, "mini_batch_size:\t%d\n", d.MiniBatchSize)
	fmt.Fprintf(w, "retry_settings:\tmax_retries %d, timeout %d s\n", *d.RetrySettings.MaxRetries, d.RetrySettings.Timeout)
	fmt.Fprintf(w, "error_threshold:\t%d\n", *d.ErrorThreshold)
	fmt.Fprintf(w, "output_action:\t%s\n", d.OutputAction)
	if d.OutputAction == "append_row" {
		fmt.Fprintf(w, "output_file_name:\t%s\n", d.OutputFileName)
	}
	fmt.Fprintf(w, "logging_level:\t%s\n", d.LoggingLevel)
	fmt.Fprintf(w, "updated:\t%s\n", d.Updated.Local().Format("2006-01-02 15:04:05"))
}

// batchDeploymentArgs reads the deployment and endpoint a command names.
func batchDeploymentArgs(args []string, name, endpoint string) (string, error) {
	n, err := deploymentName(args, name)
	if err != nil {
		return "", err
	}
	if endpoint == "" {
		return "", errors.New("--endpoint-name: which batch endpoint's deployment? give --endpoint-name ENDPOINT")
	}
	return n, nil
}

func (a *app) batchDeploymentShowCmd() *cobra.Command {
	var name, endpoint string
	cmd := &cobra.Command{
		Use: "show NAME --endpoint-name ENDPOINT", Short: "Show a batch deployment", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := batchDeploymentArgs(args, name, endpoint)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.GetBatchDeployment(cmd.Context(), endpoint, n)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showBatchDeployment(w, v) })
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "deployment name")
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", "its batch endpoint")
	return cmd
}

func (a *app) batchDeploymentListCmd() *cobra.Command {
	var endpoint string
	cmd := &cobra.Command{
		Use: "list --endpoint-name ENDPOINT", Short: "List a batch endpoint's deployments", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint == "" {
				return errors.New("--endpoint-name: which batch endpoint's deployments?")
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ds, err := c.ListBatchDeployments(cmd.Context(), endpoint)
			if err != nil {
				return err
			}
			return a.print(ds, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tDEFAULT\tCOMPUTE\tINSTANCES\tWORKERS\tMINI-BATCH\tOUTPUT")
				for _, d := range ds {
					fmt.Fprintf(w, "%s\t%t\t%s\t%d\t%d\t%d\t%s\n", d.Name, d.Default, d.ComputeName(), d.Resources.InstanceCount,
						d.MaxConcurrencyPerInstance, d.MiniBatchSize, d.OutputAction)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", "the batch endpoint")
	return cmd
}

func (a *app) batchDeploymentDeleteCmd() *cobra.Command {
	var name, endpoint string
	var yes bool
	cmd := &cobra.Command{
		Use: "delete NAME --endpoint-name ENDPOINT", Short: "Delete a batch deployment (not the default while the endpoint has others)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := batchDeploymentArgs(args, name, endpoint)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.DeleteBatchDeployment(cmd.Context(), endpoint, n); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "batch deployment %s of %s deleted\n", n, endpoint)
			return nil
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "deployment name")
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", "its batch endpoint")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "accepted for az ml's sake; nothing is asked")
	return cmd
}
