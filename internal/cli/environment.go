package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// uploadEnvironmentFiles uploads the file or folder an inline environment
// refers to (relative to the folder of src, the file that names it) and
// returns its snapshot id; "" when it refers to none. prefix is the field
// path of the environment in src, for messages.
func (a *app) uploadEnvironmentFiles(ctx context.Context, c *client.Client, prefix string, src specFile, e *spec.Environment, limit int64) (string, error) {
	if e == nil || e.Ref != "" {
		return "", nil
	}
	p, field := environment.ContextPath(e)
	if p == "" {
		return "", nil
	}
	kind := "uri_file"
	if e.Build != nil {
		kind = "uri_folder"
	}
	return a.upload(ctx, c, pathField{file: src, field: prefix + field, value: p}, kind, limit, false)
}

// environments is the environment command group, with the catalog of
// curated environments and build.
var environments = versionedKind[apitypes.Environment, apitypes.EnvironmentRequest]{
	group: "environment", aliases: []string{"env"}, short: "Register environments (Azure ML v2 environment files) and build them ahead of jobs",
	what: "environment", api: client.Environments, show: showEnvironment,
	pick: newRefArg,
	create: createVerb[apitypes.EnvironmentRequest]{
		short: "Register an environment version from an environment YAML file",
		read:  (*app).readEnvironmentFile,
	},
	showShort: "Show an environment version (the latest when no version is given)",
	more:      []func(*app) *cobra.Command{(*app).environmentListCmd, (*app).environmentBuildCmd},
}

// readEnvironmentFile is environment create's read: the files the
// environment refers to (its conda file, its build context) are uploaded
// relative to its file.
func (a *app) readEnvironmentFile(o createOpts) (func(context.Context, *client.Client) (apitypes.EnvironmentRequest, error), error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	f, err := spec.ParseEnvironment(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	if o.version != "" {
		f.Version = o.version
	}
	return func(ctx context.Context, c *client.Client) (apitypes.EnvironmentRequest, error) {
		id, err := a.uploadEnvironmentFiles(ctx, c, "", specFile{name: o.file, data: data}, f.Environment(), defaultMaxSnapshot)
		if err != nil {
			return apitypes.EnvironmentRequest{}, err
		}
		raw, err := jsonOf(f)
		return apitypes.EnvironmentRequest{Spec: raw, ContextSnapshot: id}, err
	}, nil
}

// environmentListCmd lists registered environments, or the catalog of
// curated ones.
func (a *app) environmentListCmd() *cobra.Command {
	var catalog bool
	list := &cobra.Command{
		Use:   "list [NAME] [--catalog]",
		Short: "List registered environments, or the versions of one; --catalog lists the built-in (curated) ones",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if catalog {
				if len(args) > 0 {
					return fmt.Errorf("--catalog lists the whole catalog; leave out %s", args[0])
				}
				return a.listEnvironmentCatalog(cmd.Context(), c)
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			vs, err := c.ListEnvironments(cmd.Context(), name)
			if err != nil {
				return err
			}
			return a.print(vs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tVERSION\tKIND\tHASH\tCREATED")
				for _, v := range vs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", v.Name, v.Version, v.Spec.Kind, v.Hash[:12], v.Created.Local().Format("2006-01-02 15:04"))
				}
			})
		},
	}
	list.Flags().BoolVar(&catalog, "catalog", false, "list the catalog of curated environments (Azure's built-in ones, as azureml:AzureML-NAME@latest or azureml://registries/azureml/environments/NAME/labels/latest) instead of the registered ones")
	return list
}

// environmentBuildCmd builds an environment where jobs will run.
func (a *app) environmentBuildCmd() *cobra.Command {
	var computeName string
	build := &cobra.Command{
		Use:   "build NAME[:VERSION|@latest]|azureml://registries/azureml/... --compute TARGET",
		Short: "Build an environment on a compute target ahead of the jobs that use it",
		Long: `Build an environment on a compute target ahead of the jobs that use it.

It submits a job that runs ` + "`true`" + ` in the environment, so the build happens
where jobs will run, streams its log, and leaves the build in the target's
cache for every later job with the same environment. A built-in (curated)
environment from the catalog is pulled the same way.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ref, label, err := buildRef(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			j := &spec.Job{
				Type: "command", Command: "true", Compute: computeName,
				DisplayName:    "build environment " + label,
				ExperimentName: "environment-builds",
				Environment:    &spec.Environment{Ref: ref},
				Tags:           map[string]string{"ferry.environment": label},
			}
			raw, err := jsonOf(j)
			if err != nil {
				return err
			}
			v, err := c.SubmitJob(cmd.Context(), apitypes.JobRequest{Spec: raw})
			if err != nil {
				return err
			}
			return a.streamToEnd(cmd.Context(), c, v.Name)
		},
	}
	build.Flags().StringVar(&computeName, "compute", "local", "compute target to build on")
	return build
}

// listEnvironmentCatalog prints the catalog of curated environments.
func (a *app) listEnvironmentCatalog(ctx context.Context, c *client.Client) error {
	es, err := c.EnvironmentCatalog(ctx)
	if err != nil {
		return err
	}
	return a.print(es, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "NAME\tVERSIONS\tIMAGE\tSOFTWARE\tDESCRIPTION")
		for _, e := range es {
			sw := e.Describe()
			if sw == "" {
				sw = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.VersionList(), e.ImageOf(), sw, e.Description)
		}
	})
}

// buildRef is the reference an environment build's job names, and how
// the job is labelled: a registered environment pinned to the version the
// workspace has, else the reference as the user wrote it, which the
// workspace resolves through its catalog of curated environments (or
// refuses, saying what it has).
func buildRef(ctx context.Context, c *client.Client, arg string) (ref, label string, err error) {
	if strings.HasPrefix(arg, "azureml://") {
		return arg, arg, nil
	}
	name, ver := splitEnvRef(arg)
	env, err := c.GetEnvironment(ctx, name, ver)
	var ae *client.APIError
	switch {
	case err == nil:
		return "azureml:" + env.Name + ":" + env.Version, env.Name + ":" + env.Version, nil
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		if ver == "latest" {
			return "azureml:" + name + "@latest", name + "@latest", nil
		}
		return "azureml:" + name + ":" + ver, name + ":" + ver, nil
	}
	return "", "", err
}

// splitEnvRef reads NAME, NAME:VERSION, NAME@latest, with or without the
// azureml: prefix; the version is "latest" when none is given.
func splitEnvRef(ref string) (name, version string) {
	ref = strings.TrimPrefix(ref, "azureml:")
	if n, ok := strings.CutSuffix(ref, "@latest"); ok {
		return n, "latest"
	}
	if n, v, ok := strings.Cut(ref, ":"); ok {
		return n, v
	}
	return ref, "latest"
}

func showEnvironment(w *tabwriter.Writer, v *apitypes.Environment) {
	fmt.Fprintf(w, "name:\t%s\n", v.Name)
	fmt.Fprintf(w, "version:\t%s\n", v.Version)
	if v.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", v.Description)
	}
	fmt.Fprintf(w, "kind:\t%s\n", v.Spec.Describe())
	fmt.Fprintf(w, "hash:\t%s\n", v.Hash)
	fmt.Fprintf(w, "created:\t%s\n", v.Created.Local().Format("2006-01-02 15:04:05"))
	fmt.Fprintf(w, "use it in a job as:\tenvironment: azureml:%s:%s\n", v.Name, v.Version)
}

// inlineEnvironmentFile reads the environment file that an environment
// written as file:PATH names (relative to src, the file that names it), as
// Azure's CLI does, and returns its environment to send inline. It also
// returns the file and the field prefix that the environment's own paths
// (its conda file, its build context) are relative to and reported at: the
// environment file's when there is one, else src's environment field. Any
// other environment comes back as it is.
func inlineEnvironmentFile(src specFile, e *spec.Environment) (*spec.Environment, specFile, string, error) {
	p := e.FilePath()
	if p == "" {
		return e, src, "environment.", nil
	}
	f := pathField{file: src, field: "environment", value: p}
	data, err := os.ReadFile(f.path())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, specFile{}, "", f.notFound()
	case err != nil:
		return nil, specFile{}, "", f.errorf("%v", err)
	}
	env, err := spec.ParseInlineEnvironment(data)
	if err != nil {
		return nil, specFile{}, "", fmt.Errorf("%s (the environment file of %s): %w", f.path(), src.name, err)
	}
	return env, specFile{name: f.path(), data: data}, "", nil
}
