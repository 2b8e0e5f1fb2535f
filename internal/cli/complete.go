package cli

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/server"
)

// Shell completion (`ferry completion bash|zsh|fish|powershell`, which
// cobra adds, asks the hidden `ferry __complete ARGS...`) of the names the
// workspace knows: jobs, computes, a cluster's nodes, environments, sizes
// and size families. Completion never starts a server and gives up after
// a few seconds: a shell waiting on a TAB is worse than no suggestions.

const completeTimeout = 3 * time.Second

// lister lists the names to complete, each "name" or "name\tdescription".
type lister func(ctx context.Context, c *client.Client, args []string) ([]string, error)

// completeClient is a client of the workspace the user means, without
// starting a local server; nil when none runs.
func (a *app) completeClient(ctx context.Context) *client.Client {
	if u := a.getenv("FERRY_URL"); u != "" {
		return client.New(u, a.getenv("FERRY_TOKEN"))
	}
	home, err := a.home()
	if err != nil {
		return nil
	}
	u, ok := liveServer(ctx, home)
	if !ok {
		return nil
	}
	tok := a.getenv("FERRY_TOKEN")
	if tok == "" {
		data, err := os.ReadFile(filepath.Join(home, server.TokenFile))
		if err != nil {
			return nil
		}
		tok = strings.TrimSpace(string(data))
	}
	return client.New(u, tok)
}

// complete turns a lister into a cobra completion function: the names that
// start with what is typed, no file names.
func (a *app) complete(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
		defer cancel()
		c := a.completeClient(ctx)
		if c == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := list(ctx, c, args)
		if err != nil {
			cobra.CompDebugln("ferry completion: "+err.Error(), true)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// firstArg completes the first argument with list, and nothing after it.
func (a *app) firstArg(list lister) cobra.CompletionFunc {
	return firstArgWith(a.complete(list))
}

// firstArgWith completes the first argument with f, and nothing after it.
func firstArgWith(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

func listJobNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	jobs, err := c.ListJobs(ctx, url.Values{"limit": {"500"}})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, j := range jobs {
		desc := j.Status
		if j.DisplayName != "" {
			desc += ", " + j.DisplayName
		}
		out = append(out, j.Name+"\t"+desc)
	}
	return out, nil
}

func listComputeNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	vs, err := c.ListComputes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.Name+"\t"+v.Type+", "+v.State)
	}
	return out, nil
}

// listNodeNames lists the nodes of the compute named by args[0].
func listNodeNames(ctx context.Context, c *client.Client, args []string) ([]string, error) {
	if len(args) != 1 {
		return nil, nil
	}
	ns, err := c.ListNodes(ctx, args[0])
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range ns {
		out = append(out, n.Name+"\t"+n.State)
	}
	return out, nil
}

func listEnvironmentNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	vs, err := c.ListEnvironments(ctx, "")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if !seen[v.Name] {
			seen[v.Name] = true
			out = append(out, v.Name+"\t"+v.Spec.Kind)
		}
		out = append(out, v.Name+":"+v.Version)
	}
	return out, nil
}

func listSizeNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ss, err := c.ListSizes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range ss {
		desc := fmt.Sprintf("%d vCPUs, %g GiB", s.VCPUs, s.MemoryGiB)
		if s.GPUs > 0 {
			desc += fmt.Sprintf(", %d %s GPUs", s.GPUs, s.GPUType)
		}
		out = append(out, s.Name+"\t"+desc)
	}
	return out, nil
}

func listSizeFamilies(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ss, err := c.ListSizes(ctx)
	if err != nil {
		return nil, err
	}
	fams := map[string]bool{}
	for _, s := range ss {
		fams[s.Family] = true
	}
	return slices.Sorted(maps.Keys(fams)), nil
}

// setValues completes the values of --set fields that name things in the
// workspace: --set compute=<TAB>, --set environment=<TAB>, --set size=<TAB>.
func setValues(fields map[string]lister) lister {
	return func(ctx context.Context, c *client.Client, args []string) ([]string, error) {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			names, err := fields[k](ctx, c, args)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				out = append(out, k+"="+n)
			}
		}
		return out, nil
	}
}

// addCompletions gives the commands under root their completions: each
// NAME argument by the kind of thing its command group is about, --compute
// by compute names, and --set by the names its fields take.
func (a *app) addCompletions(root *cobra.Command) {
	byGroup := map[string]lister{"job": listJobNames, "compute": listComputeNames, "environment": listEnvironmentNames}
	for _, group := range root.Commands() {
		for _, cmd := range group.Commands() {
			words := strings.Fields(cmd.Use)
			if list, ok := byGroup[group.Name()]; ok && len(words) > 1 && strings.HasPrefix(strings.Trim(words[1], "[]"), "NAME") {
				cmd.ValidArgsFunction = a.firstArg(list)
			}
			if group.Name() == "compute" && cmd.Name() == "preempt-node" {
				names, nodes := a.complete(listComputeNames), a.complete(listNodeNames)
				cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
					if len(args) == 0 {
						return names(c, args, toComplete)
					}
					return nodes(c, args, toComplete)
				}
			}
			if group.Name() == "quota" {
				switch cmd.Name() {
				case "set":
					cmd.ValidArgsFunction = a.firstArg(listSizeFamilies)
				case "enable-size":
					cmd.ValidArgsFunction = a.firstArg(listSizeNames)
				}
			}
			if cmd.Flags().Lookup("compute") != nil {
				_ = cmd.RegisterFlagCompletionFunc("compute", a.complete(listComputeNames))
			}
			if cmd.Flags().Lookup("set") != nil {
				fields := map[string]lister{"size": listSizeNames}
				if group.Name() == "job" {
					fields = map[string]lister{"compute": listComputeNames, "environment": listEnvironmentNames, "resources.instance_type": listSizeNames}
				}
				_ = cmd.RegisterFlagCompletionFunc("set", a.complete(setValues(fields)))
			}
		}
	}
}
