package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// batch-deployment: `az ml batch-deployment` with its verbs, files and
// flags (docs/batch-endpoints.md).

func (a *app) batchDeploymentCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "batch-deployment", Short: "Batch deployments (Azure ML v2 modelBatchDeployment files): the scoring script, model, environment and compute of a batch endpoint's jobs"}
	cmd.AddCommand(a.batchDeploymentPutCmd(true), a.batchDeploymentPutCmd(false), a.batchDeploymentShowCmd(), a.batchDeploymentListCmd(), a.batchDeploymentDeleteCmd())
	for _, sub := range cmd.Commands() {
		_ = sub.RegisterFlagCompletionFunc("endpoint-name", a.complete(listBatchEndpointNames))
	}
	return cmd
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
				n, err := batchDeploymentArg.name.pick(args, name)
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
	files, err := checkDeploymentFiles(src, d.CodeConfiguration, d.Model, d.Environment, envSrc, envField)
	if err != nil {
		return err
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
	up, err := files.upload(ctx, a, c)
	if err != nil {
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

// batchDeploymentArg is how the batch-deployment commands name a
// deployment.
var batchDeploymentArg = deploymentArg{
	name:         nameArg{help: "deployment name", twice: deploymentNamedTwice, none: deploymentNamedNone},
	endpointHelp: "its batch endpoint",
	noEndpoint: func(string) error {
		return errors.New("--endpoint-name: which batch endpoint's deployment? give --endpoint-name ENDPOINT")
	},
}

func (a *app) batchDeploymentShowCmd() *cobra.Command {
	return batchDeploymentArg.cmd(a, "show NAME --endpoint-name ENDPOINT", "Show a batch deployment", func(cmd *cobra.Command, c *client.Client, endpoint, name string) error {
		v, err := c.GetBatchDeployment(cmd.Context(), endpoint, name)
		if err != nil {
			return err
		}
		return a.print(v, func(w *tabwriter.Writer) { showBatchDeployment(w, v) })
	})
}

func (a *app) batchDeploymentListCmd() *cobra.Command {
	var endpoint string
	cmd := &cobra.Command{
		Use: "list --endpoint-name ENDPOINT", Short: "List a batch endpoint's deployments", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint == "" {
				return errors.New("--endpoint-name: which batch endpoint's deployments?")
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]*apitypes.BatchDeployment, error) {
				return c.ListBatchDeployments(cmd.Context(), endpoint)
			}, batchDeploymentTable)
		},
	}
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", "the batch endpoint")
	return cmd
}

func batchDeploymentTable(w *tabwriter.Writer, ds []*apitypes.BatchDeployment) {
	fmt.Fprintln(w, "NAME\tDEFAULT\tCOMPUTE\tINSTANCES\tWORKERS\tMINI-BATCH\tOUTPUT")
	for _, d := range ds {
		fmt.Fprintf(w, "%s\t%t\t%s\t%d\t%d\t%d\t%s\n", d.Name, d.Default, d.ComputeName(), d.Resources.InstanceCount,
			d.MaxConcurrencyPerInstance, d.MiniBatchSize, d.OutputAction)
	}
}

func (a *app) batchDeploymentDeleteCmd() *cobra.Command {
	var yes bool
	cmd := batchDeploymentArg.cmd(a, "delete NAME --endpoint-name ENDPOINT", "Delete a batch deployment (not the default while the endpoint has others)", func(cmd *cobra.Command, c *client.Client, endpoint, name string) error {
		if err := c.DeleteBatchDeployment(cmd.Context(), endpoint, name); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "batch deployment %s of %s deleted\n", name, endpoint)
		return nil
	})
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "accepted for az ml's sake; nothing is asked")
	return cmd
}
