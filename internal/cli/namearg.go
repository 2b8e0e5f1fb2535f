package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
)

// nameArg is how the commands of a kind name one thing, as az ml names
// it: the argument, or --name/-n.
type nameArg struct {
	help  string // --name's help
	twice string // the error when the argument and --name differ: a format of the two
	none  string // the error when neither is given
}

// add gives cmd its --name/-n flag, read into name.
func (n nameArg) add(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVarP(name, "name", "n", "", n.help)
}

// pick is the name the argument (args) or --name (flag) gives.
func (n nameArg) pick(args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && args[0] != flag:
		return "", fmt.Errorf(n.twice, args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "", errors.New(n.none)
}

// cmd is a command about one thing, named as n reads it: run gets a
// connected client and the name. Callers add flags of their own to what
// it returns.
func (n nameArg) cmd(a *app, use, short string, run func(cmd *cobra.Command, c *client.Client, name string) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			picked, err := n.pick(args, name)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return run(cmd, c, picked)
		},
	}
	n.add(cmd, &name)
	return cmd
}

// deploymentArg is how the commands of a deployment kind name one, as az
// ml does: by its name (a nameArg) and its endpoint's, --endpoint-name/-e.
type deploymentArg struct {
	name         nameArg
	endpointHelp string                  // --endpoint-name's help
	noEndpoint   func(name string) error // the error when it is not given
}

// What a deployment command says when it is given two names, or none.
const (
	deploymentNamedTwice = "the deployment is %s or %s? give its name once"
	deploymentNamedNone  = "which deployment? give its name: --name NAME (or -n NAME, or NAME) with --endpoint-name ENDPOINT"
)

// cmd is a command about one deployment, named as d reads it: run gets a
// connected client, the endpoint and the name. Callers add flags of
// their own to what it returns.
func (d deploymentArg) cmd(a *app, use, short string, run func(cmd *cobra.Command, c *client.Client, endpoint, name string) error) *cobra.Command {
	var name, endpoint string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := d.name.pick(args, name)
			if err != nil {
				return err
			}
			if endpoint == "" {
				return d.noEndpoint(n)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return run(cmd, c, endpoint, n)
		},
	}
	d.name.add(cmd, &name)
	cmd.Flags().StringVarP(&endpoint, "endpoint-name", "e", "", d.endpointHelp)
	return cmd
}
