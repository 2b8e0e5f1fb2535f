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

// onlineEndpoints is the online-endpoint command group.
var onlineEndpoints = namedKind[apitypes.OnlineEndpoint, *spec.OnlineEndpoint]{
	group: "online-endpoint", short: "Online endpoints (Azure ML v2 managedOnlineEndpoint files): a scoring URI, its keys and its traffic split",
	what: "endpoint", api: client.OnlineEndpoints, arg: endpointArg, parse: spec.ParseOnlineEndpoint,
	show: showEndpoint, table: endpointTable, names: listEndpointNames,
	create: &putVerb[apitypes.OnlineEndpoint, *spec.OnlineEndpoint]{
		verbHelp: verbHelp{"create -f FILE [--name NAME]", "Create an online endpoint; it gets a primary and a secondary key (ferry online-endpoint get-credentials)"},
		fileHelp: "online endpoint YAML file (required)",
		setHelp:  "override a field: --set path=value (repeatable), e.g. --set tags.stage=prod",
		put:      (*client.Client).CreateOnlineEndpoint,
	},
	showVerb:  verbHelp{"show [NAME]", "Show an online endpoint: its scoring_uri, auth_mode, traffic and state (never its keys)"},
	listShort: "List online endpoints",
	del: deleteVerb{
		verbHelp: verbHelp{"delete [NAME] [--yes]", "Delete an online endpoint; its scoring URI stops answering at once"},
		yesHelp:  "do not ask (ferry never asks; accepted as az ml takes it)",
		done:     func(a *app, name string) { fmt.Fprintf(a.stdout, "deleted online endpoint %s\n", name) },
	},
	more: []func(*app) *cobra.Command{(*app).endpointUpdateCmd, (*app).endpointCredentialsCmd, (*app).endpointRegenerateCmd, (*app).endpointInvokeCmd},
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

// endpointArg is how the endpoint commands name an endpoint.
var endpointArg = nameArg{
	help:  "the endpoint's name (or give it as the argument)",
	twice: "the endpoint is %s or %s? give its name once",
	none:  "which endpoint? give its name: --name NAME (or -n NAME, or NAME)",
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
				e, err := readNamedFile(file, name, sets, spec.ParseOnlineEndpoint)
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
			n, err := endpointArg.pick(args, name)
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
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*apitypes.OnlineEndpoint, error) {
				return c.UpdateOnlineEndpoint(cmd.Context(), n, u)
			}, showEndpoint)
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

func endpointTable(w *tabwriter.Writer, es []*apitypes.OnlineEndpoint) {
	fmt.Fprintln(w, "NAME\tAUTH\tSTATE\tTRAFFIC\tSCORING URI")
	for _, e := range es {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.AuthMode, e.ProvisioningState, dash(spec.FormatTraffic(e.Traffic)), e.ScoringURI)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) endpointCredentialsCmd() *cobra.Command {
	cmd := endpointArg.cmd(a, "get-credentials [NAME]", "Print an endpoint's keys, primaryKey and secondaryKey (auth_mode key), or a token, accessToken with its expiryTimeUtc (auth_mode aml_token), as az ml does (JSON unless -o yaml)",
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
	cmd := endpointArg.cmd(a, "regenerate-keys [NAME] [--key-type primary|secondary]", "Replace an endpoint's primary (the default) or secondary key; the old one stops working at once",
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
	cmd := endpointArg.cmd(a, "invoke [NAME] --request-file FILE [--deployment D]", "Score with an endpoint: POST the file to its scoring_uri with its primary key and print the answer",
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
