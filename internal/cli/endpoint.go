package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// online-endpoint: `az ml online-endpoint` with its verbs, files and flags.

func (a *app) onlineEndpointCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "online-endpoint", Short: "Online endpoints (Azure ML v2 managedOnlineEndpoint files): a scoring URI, its keys and its traffic split"}
	cmd.AddCommand(a.endpointCreateCmd(), a.endpointUpdateCmd(), a.endpointShowCmd(), a.endpointListCmd(), a.endpointDeleteCmd(),
		a.endpointCredentialsCmd(), a.endpointRegenerateCmd(), a.endpointInvokeCmd())
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(listEndpointNames)
			_ = sub.RegisterFlagCompletionFunc("name", a.complete(listEndpointNames))
		}
	}
	return cmd
}

func listEndpointNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	es, err := c.ListOnlineEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name+"\t"+e.ScoringURI)
	}
	return out, nil
}

// endpointName reads the endpoint a command names: --name/-n as in az ml,
// or the argument.
func endpointName(args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && args[0] != flag:
		return "", fmt.Errorf("the endpoint is %s or %s? give its name once", args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "", errors.New("which endpoint? give its name: --name NAME (or -n NAME, or NAME)")
}

// readEndpointFile parses an endpoint file, --name overriding its name.
func readEndpointFile(file, name string, sets []string) (*spec.OnlineEndpoint, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if name != "" {
		sets = append(sets, "name="+name)
	}
	e, err := spec.ParseOnlineEndpoint(data, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return e, nil
}

func (a *app) endpointCreateCmd() *cobra.Command {
	var file, name string
	var sets []string
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name NAME]",
		Short: "Create an online endpoint; it gets a primary and a secondary key (ferry online-endpoint get-credentials)",
		Args:  cobra.MaximumNArgs(1),
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
			e, err := readEndpointFile(file, name, sets)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.CreateOnlineEndpoint(cmd.Context(), e)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showEndpoint(w, v) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "online endpoint YAML file (required)")
	f.StringVarP(&name, "name", "n", "", "endpoint name (default: the file's)")
	f.StringArrayVar(&sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set tags.stage=prod")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) endpointUpdateCmd() *cobra.Command {
	var file, name, traffic, mirror string
	var sets []string
	cmd := &cobra.Command{
		Use:   "update [NAME] [-f FILE] [--traffic \"blue=90 green=10\"] [--mirror-traffic \"green=10\"]",
		Short: "Change an endpoint's description, tags, traffic split or mirrored traffic",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			var u apitypes.EndpointUpdate
			if file != "" {
				e, err := readEndpointFile(file, name, sets)
				if err != nil {
					return err
				}
				if len(args) == 1 && args[0] != e.Name {
					return fmt.Errorf("the endpoint is %s or %s (%s's name)? give its name once", args[0], e.Name, file)
				}
				name = e.Name
				u = apitypes.EndpointUpdate{Description: &e.Description, Tags: e.Tags, Traffic: e.Traffic, MirrorTraffic: e.MirrorTraffic, AuthMode: e.AuthMode}
			} else if len(sets) > 0 {
				return errors.New("--set needs a file (-f FILE); without one, use --traffic and --mirror-traffic")
			}
			n, err := endpointName(args, name)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("traffic") {
				if u.Traffic, err = spec.ParseTraffic(traffic); err != nil {
					return fmt.Errorf("--traffic: %w", err)
				}
			}
			if cmd.Flags().Changed("mirror-traffic") {
				if u.MirrorTraffic, err = spec.ParseTraffic(mirror); err != nil {
					return fmt.Errorf("--mirror-traffic: %w", err)
				}
			}
			if file == "" && u.Traffic == nil && u.MirrorTraffic == nil {
				return errors.New("nothing to change: give -f FILE, --traffic or --mirror-traffic")
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.UpdateOnlineEndpoint(cmd.Context(), n, u)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showEndpoint(w, v) })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "online endpoint YAML file: its description, tags, traffic and mirror_traffic")
	f.StringVarP(&name, "name", "n", "", "the endpoint's name (or give it as the argument)")
	f.StringVar(&traffic, "traffic", "", `the traffic split, e.g. "blue=90 green=10" ("" sends none)`)
	f.StringVar(&mirror, "mirror-traffic", "", `mirrored traffic, e.g. "green=10" ("" mirrors none)`)
	f.StringArrayVar(&sets, "set", nil, "override a field of the file: --set path=value (repeatable)")
	return cmd
}

func (a *app) endpointShowCmd() *cobra.Command {
	return a.namedEndpointCmd("show [NAME]", "Show an online endpoint: its scoring_uri, auth_mode, traffic and state (never its keys)",
		func(cmd *cobra.Command, c *client.Client, n string) error {
			v, err := c.GetOnlineEndpoint(cmd.Context(), n)
			if err != nil {
				return err
			}
			return a.print(v, func(w *tabwriter.Writer) { showEndpoint(w, v) })
		})
}

// namedEndpointCmd is a command about one endpoint, named as az ml names
// it (the argument or --name/-n): run gets a connected client and the
// name. Callers add flags of their own to what it returns.
func (a *app) namedEndpointCmd(use, short string, run func(cmd *cobra.Command, c *client.Client, name string) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := endpointName(args, name)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return run(cmd, c, n)
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "the endpoint's name (or give it as the argument)")
	return cmd
}

func (a *app) endpointListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List online endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			es, err := c.ListOnlineEndpoints(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(es, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tAUTH\tSTATE\tTRAFFIC\tSCORING URI")
				for _, e := range es {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.AuthMode, e.ProvisioningState, dash(spec.FormatTraffic(e.Traffic)), e.ScoringURI)
				}
			})
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) endpointDeleteCmd() *cobra.Command {
	var yes bool
	cmd := a.namedEndpointCmd("delete [NAME] [--yes]", "Delete an online endpoint; its scoring URI stops answering at once",
		func(cmd *cobra.Command, c *client.Client, n string) error {
			if err := c.DeleteOnlineEndpoint(cmd.Context(), n); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "deleted online endpoint %s\n", n)
			return nil
		})
	// az ml asks before deleting unless --yes; scripts written for it pass
	// --yes, so it is accepted. Ferry does not ask.
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask (ferry never asks; accepted as az ml takes it)")
	return cmd
}

func (a *app) endpointCredentialsCmd() *cobra.Command {
	cmd := a.namedEndpointCmd("get-credentials [NAME]", "Print an endpoint's keys, primaryKey and secondaryKey (auth_mode key), or a token, accessToken with its expiryTimeUtc (auth_mode aml_token), as az ml does (JSON unless -o yaml)",
		func(cmd *cobra.Command, c *client.Client, n string) error {
			keys, err := c.GetEndpointCredentials(cmd.Context(), n)
			if err != nil {
				return err
			}
			if a.output == "yaml" {
				return a.print(keys, nil)
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(keys)
		})
	cmd.PreRunE = func(*cobra.Command, []string) error { return a.checkOutput() }
	return cmd
}

func (a *app) endpointRegenerateCmd() *cobra.Command {
	var keyType string
	cmd := a.namedEndpointCmd("regenerate-keys [NAME] [--key-type primary|secondary]", "Replace an endpoint's primary (the default) or secondary key; the old one stops working at once",
		func(cmd *cobra.Command, c *client.Client, n string) error {
			if _, err := c.RegenerateEndpointKey(cmd.Context(), n, keyType); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "regenerated the %s key of online endpoint %s (ferry online-endpoint get-credentials -n %s shows it)\n", keyType, n, n)
			return nil
		})
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if keyType != "primary" && keyType != "secondary" {
			return fmt.Errorf("--key-type: %q is not primary or secondary", keyType)
		}
		return nil
	}
	cmd.Flags().StringVar(&keyType, "key-type", "primary", "which key: primary or secondary")
	_ = cmd.RegisterFlagCompletionFunc("key-type", cobra.FixedCompletions([]string{"primary", "secondary"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) endpointInvokeCmd() *cobra.Command {
	var deployment, requestFile string
	cmd := a.namedEndpointCmd("invoke [NAME] --request-file FILE [--deployment D]", "Score with an endpoint: POST the file to its scoring_uri with its primary key and print the answer",
		func(cmd *cobra.Command, c *client.Client, n string) error {
			body, err := os.Open(requestFile)
			if err != nil {
				return fmt.Errorf("--request-file: %w", err)
			}
			defer body.Close()
			e, err := c.GetOnlineEndpoint(cmd.Context(), n)
			if err != nil {
				return err
			}
			keys, err := c.GetEndpointCredentials(cmd.Context(), n)
			if err != nil {
				return err
			}
			out, err := c.Score(cmd.Context(), e.ScoringURI, keys.Credential(), deployment, body)
			var se *client.ScoreError
			if errors.As(err, &se) {
				return fmt.Errorf("endpoint %s answered %w", n, se)
			}
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(out)
			if len(out) > 0 && out[len(out)-1] != '\n' {
				fmt.Fprintln(a.stdout)
			}
			return err
		})
	cmd.Flags().StringVarP(&deployment, "deployment", "d", "", "score with this deployment, whatever the traffic split (the azureml-model-deployment header)")
	cmd.Flags().StringVarP(&requestFile, "request-file", "r", "", "file whose content is the request body (required)")
	_ = cmd.MarkFlagRequired("request-file")
	return cmd
}

func showEndpoint(w *tabwriter.Writer, e *apitypes.OnlineEndpoint) {
	fmt.Fprintf(w, "name:\t%s\n", e.Name)
	fmt.Fprintf(w, "scoring_uri:\t%s\n", e.ScoringURI)
	fmt.Fprintf(w, "auth_mode:\t%s\n", e.AuthMode)
	fmt.Fprintf(w, "provisioning_state:\t%s\n", e.ProvisioningState)
	if e.Compute != "" {
		fmt.Fprintf(w, "compute:\t%s (but for managedOnlineDeployments, which run on pool nodes)\n", e.Compute)
	}
	fmt.Fprintf(w, "traffic:\t%s\n", dash(spec.FormatTraffic(e.Traffic)))
	if len(e.MirrorTraffic) > 0 {
		fmt.Fprintf(w, "mirror_traffic:\t%s\n", spec.FormatTraffic(e.MirrorTraffic))
	}
	if e.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", e.Description)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Tags)) {
		fmt.Fprintf(w, "tags.%s:\t%s\n", k, e.Tags[k])
	}
	fmt.Fprintf(w, "created:\t%s\n", e.Created.Local().Format("2006-01-02 15:04:05"))
	for _, d := range slices.Sorted(maps.Keys(e.Deployments)) {
		s := e.Deployments[d]
		fmt.Fprintf(w, "deployment %s:\t%d requests (%d errors), p50 %.1f ms, p99 %.1f ms\n", d, s.Requests, s.Errors, s.P50MS, s.P99MS)
	}
}
