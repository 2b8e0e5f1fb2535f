package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/agent"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/selfexe"
)

func (a *app) agentCmd() *cobra.Command {
	var cfg agent.Config
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a node agent: join a compute target and run the jobs it gets (started by node providers)",
		Long: `Run the node agent of a cluster or compute instance node. It joins the
workspace at --server with the compute's join token, read from
$FERRY_JOIN_TOKEN, reports the node's CPUs, memory and GPUs (nvidia-smi;
CUDA_VISIBLE_DEVICES limits them), heartbeats, and starts a runner for each
job attempt the server assigns to the node.

Runners outlive the agent: SIGTERM stops the agent and leaves them running,
and an agent restarted with the same --dir takes them back. The agent exits
0 when the server drains the node and nothing runs any more, and non-zero
when the server refuses it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.JoinToken = a.getenv("FERRY_JOIN_TOKEN")
			// Out of the process's environment, so that nothing started
			// from here inherits it.
			os.Unsetenv("FERRY_JOIN_TOKEN")
			if cfg.JoinToken == "" {
				return errors.New("FERRY_JOIN_TOKEN is not set; set it to the compute's join token")
			}
			if cfg.EnvCacheSize != "" {
				if _, err := environment.ParseBytes(cfg.EnvCacheSize); err != nil {
					return fmt.Errorf("--env-cache-size: %w", err)
				}
			}
			if cfg.RunAs != "" {
				if _, err := isolation.Lookup(cfg.RunAs); err != nil {
					return fmt.Errorf("--run-as: %w", err)
				}
			}
			if cfg.JobUIDs != "" {
				if cfg.RunAs == "" {
					return errors.New("--job-uids needs --run-as: the account whose name the attempts' uids carry")
				}
				if _, err := isolation.ParseUIDRange(cfg.JobUIDs); err != nil {
					return fmt.Errorf("--job-uids: %w", err)
				}
			}
			if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
				return err
			}
			// Runners are started from a stable copy of this binary, so an
			// upgrade or a `go run` that deletes it leaves them able to start.
			exe, err := selfexe.Install(filepath.Join(cfg.Dir, "bin"))
			if err != nil {
				return err
			}
			cfg.Exe = exe
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Log = slog.New(slog.NewTextHandler(a.stderr, nil))
			return agent.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "workspace URL (required)")
	f.StringVar(&cfg.ServerFile, "server-file", "", "file in which the server records its URL on this host; read when --server cannot be reached, to follow a server restarted at another address")
	f.StringVar(&cfg.Name, "name", "", "node name (default: the hostname)")
	f.StringVar(&cfg.Dir, "dir", "", "the node's directory: state, runs, caches (required)")
	f.StringVar(&cfg.CacheDir, "cache", "", "the node's blob cache (default DIR/cache)")
	f.StringVar(&cfg.EnvCacheDir, "env-cache", "", "the node's built environments (default DIR/env-cache)")
	f.StringVar(&cfg.EnvCacheSize, "env-cache-size", "50g", "bound of the built environments; least recently used ones above it are removed")
	f.DurationVar(&cfg.CancelGrace, "cancel-grace", 10*time.Second, "time a canceled job gets between SIGTERM and SIGKILL")
	f.DurationVar(&cfg.GiveUpAfter, "give-up-after", 24*time.Hour, "exit when the server has not answered for this long (runners keep going and give up on their own)")
	f.StringVar(&cfg.RunAs, "run-as", "", "account that jobs' processes run as (default: the agent's own); the way to --dir must be passable by it")
	f.StringVar(&cfg.JobUIDs, "job-uids", "", "with --run-as: run each attempt as a uid of its own from this range (FIRST-LAST, such as "+isolation.DefaultUIDs+"), named after the --run-as account")
	f.StringVar(&cfg.Address, "address", "", "address other nodes reach this one at (default: the IP toward the server)")
	for _, n := range []string{"server", "dir"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

// probeCmd answers whether this machine reaches a workspace server: the ssh
// node provider runs it on an attached machine to decide between a direct
// connection and a reverse tunnel. Any HTTP answer counts as reachable.
func (a *app) probeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    "probe URL",
		Short:  "Exit 0 when the workspace server at URL answers (used by the ssh node provider)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(args[0], "/")+"/openapi.json", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("server at %s does not answer: %w", args[0], err)
			}
			resp.Body.Close()
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for an answer")
	return cmd
}
