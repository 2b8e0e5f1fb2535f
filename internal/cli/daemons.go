package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/httplimit"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/runner"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/server"
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/timerslack"
)

func (a *app) serverCmd() *cobra.Command {
	var cfg server.Config
	var maxSnap, outputQuota string
	// The listener's and the gateway's limits given as sizes (64KiB).
	var headerBytes, bodyRate, epBody, epBuffered, epBufferedAddr string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a workspace server",
		Long: `Run a workspace: the API, the store and the dispatcher of jobs.

On first start it makes the owner's API token and writes it to
DATA_DIR/owner.token (mode 0600). The data dir is private to the server's
user (0700, its files 0600). Jobs on the local target keep running when the
server stops, and report back when it is up again.

Jobs on this machine (the local target, process-provider nodes) work in
--work-dir, outside the data dir. A server that runs as root starts their
commands as --run-as, by default the unprivileged account ferry-job, which
it makes if missing. See docs/security.md for what the local target trusts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The server runs with Ferry's timer slack, and the user code
			// it and its children start with the slack it was started
			// with. Reexec returns only when it cannot: the server then
			// runs as it is, at some CPU cost per small job.
			_ = timerslack.Reexec()
			if _, err := environment.ParseBytes(cfg.EnvCacheSize); err != nil {
				return fmt.Errorf("--env-cache-size: %w", err)
			}
			switch cfg.Provider {
			case "process", "docker":
			case "exec", "ssh":
				return fmt.Errorf("--provider: %s needs settings (exec: the program; ssh: the machines) that only a compute's provider: block gives; name it there, and leave --provider process or docker", cfg.Provider)
			default:
				return fmt.Errorf("--provider: %q is not a node provider; use process or docker here, exec or ssh in a compute's provider: block", cfg.Provider)
			}
			if maxSnap != "" {
				n, err := parseSize(maxSnap)
				if err != nil {
					return err
				}
				cfg.MaxSnapshotSize = n
			}
			switch outputQuota {
			case "none":
				cfg.OutputQuota = -1
			case "":
			default:
				n, err := parseSize(outputQuota)
				if err != nil || n == 0 {
					return fmt.Errorf("--output-quota: %q is not a size such as 10GiB (or none for no quota)", outputQuota)
				}
				cfg.OutputQuota = n
			}
			for _, sz := range []struct {
				flag, value string
				set         func(int64)
			}{
				{"--max-header-bytes", headerBytes, func(n int64) { cfg.Limits.MaxHeaderBytes = int(n) }},
				{"--body-min-rate", bodyRate, func(n int64) { cfg.Limits.BodyMinRate = n }},
				{"--endpoint-max-body", epBody, func(n int64) { cfg.EndpointMaxBody = n }},
				{"--endpoint-max-buffered", epBuffered, func(n int64) { cfg.EndpointMaxBuffered = n }},
				{"--endpoint-max-buffered-per-addr", epBufferedAddr, func(n int64) { cfg.EndpointMaxBufferedPerAddr = n }},
			} {
				n, err := parseSize(sz.value)
				if err != nil || n <= 0 {
					return fmt.Errorf("%s: %q is not a size such as 64KiB", sz.flag, sz.value)
				}
				sz.set(n)
			}
			if cfg.EndpointMaxBufferedPerAddr < cfg.EndpointMaxBody || cfg.EndpointMaxBuffered < cfg.EndpointMaxBufferedPerAddr {
				return fmt.Errorf("--endpoint-max-buffered (%s) ≥ --endpoint-max-buffered-per-addr (%s) ≥ --endpoint-max-body (%s) must hold, or a body within the limit could never be taken", epBuffered, epBufferedAddr, epBody)
			}
			if cfg.EndpointMaxRequests < 1 {
				return fmt.Errorf("--endpoint-max-requests must be at least 1 (got %d)", cfg.EndpointMaxRequests)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Log = slog.New(slog.NewTextHandler(a.stderr, nil))
			cfg.Out = a.stdout
			cfg.Version = version()
			return server.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the workspace's database, blobs and logs (required)")
	f.StringVar(&cfg.WorkDir, "work-dir", "", "directory of the jobs on this machine: attempts, built environments, process nodes; outside the data dir (default: DATA_DIR-work, or /var/lib/ferry-work/HASH when the job user cannot reach that)")
	f.StringVar(&cfg.RunAs, "run-as", "", "account that jobs on the local target and process nodes run as (default: ferry-job, made if missing, when the server runs as root; else the server's own user). Naming the server's own user runs them as it")
	f.StringVar(&cfg.JobUIDs, "job-uids", "", "when jobs run as another account (a root server): the range of uids, FIRST-LAST, that each attempt on the local target and process nodes runs as one of, alone, held for its life and shared with other servers of this host (default "+isolation.DefaultUIDs+"); none runs them all as the --run-as account")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:8580", "address to listen on (port 0 picks a free one)")
	f.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL that runners use to reach this server (default: http://ADDR)")
	f.BoolVar(&cfg.LocalExecutor, "local-executor", true, "run the local target's jobs in one long-lived executor process (ferry local-executor); false starts a runner process per job, as before (slower for small jobs; see bench/dispatch)")
	f.IntVar(&cfg.LocalCapacity, "local-capacity", 0, "jobs the local target runs at once (default: CPUs of this machine)")
	f.StringVar(&maxSnap, "max-snapshot-size", "", "largest snapshot accepted, e.g. 1GiB (default 1GiB)")
	f.StringVar(&outputQuota, "output-quota", "", "most bytes one job's outputs may hold, e.g. 10GiB (default 10GiB; none for no quota); runners skip and list what is over it")
	f.StringVar(&cfg.Provider, "provider", "process", "node provider of clusters whose file names none: process (agent processes on this machine) or docker (containers of ferry-node:bookworm on this machine's Docker; needs an --addr containers reach, such as 0.0.0.0:8580). The exec (a program that launches machines) and ssh (existing machines) providers need settings, so a compute's provider: block names them (docs/clusters.md)")
	f.StringVar(&cfg.BlobEndpoints, "blob-endpoints", os.Getenv("FERRY_BLOB_ENDPOINTS"), "ACCOUNT=URL,... base URLs that stand in for Azure storage accounts' blob services when inputs name them (a mirror, tests); default $FERRY_BLOB_ENDPOINTS")
	f.StringVar(&cfg.AgentBinaries, "agent-binaries", "", "directory of ferry-linux-ARCH binaries to copy to attached machines whose architecture differs from this server's")
	f.DurationVar(&cfg.NodeJoinTimeout, "node-join-timeout", 10*time.Minute, "how long a launched cluster node may take to join before it is terminated")
	f.DurationVar(&cfg.ServerlessIdle, "serverless-idle", 120*time.Second, "idle time before the nodes of serverless jobs go")
	f.DurationVar(&cfg.NodeLease, "node-lease", 30*time.Second, "how long a silent cluster node keeps its jobs before it is lost")
	f.DurationVar(&cfg.PreemptPoll, "preempt-poll", 10*time.Second, "how often the machines of low-priority clusters are listed to find those their provider takes back")
	f.DurationVar(&cfg.PreemptGrace, "preempt-grace", 30*time.Second, "how long the jobs of a preempted node have to stop and upload their outputs before they are queued again without them")
	f.StringVar(&cfg.SizesFile, "sizes", "", "YAML file of sizes that extend or override the built-in catalog (see ferry size list)")
	f.StringVar(&cfg.EnvironmentCatalogFile, "environment-catalog", "", "YAML file of curated environments (Azure ML's built-in environment names mapped to images) that extend or override the built-in catalog (see ferry environment list --catalog)")
	f.StringVar(&cfg.EnvCacheSize, "env-cache-size", "50g", "bound of this machine's built environments (virtualenvs, conda envs, images); least recently used ones above it are removed")
	f.DurationVar(&cfg.LeaseTimeout, "lease-timeout", 30*time.Second, "how long a silent runner keeps its job before it is failed as lost")
	f.DurationVar(&cfg.CancelGrace, "cancel-grace", 10*time.Second, "time a canceled job gets between SIGTERM and SIGKILL")
	f.DurationVar(&cfg.ScheduleMinute, "schedule-minute", time.Minute, "length of a minute for schedules' minute recurrences (tests shorten it to see firings every few seconds)")
	_ = f.MarkHidden("schedule-minute")
	// What one client may hold of the listener; docs/endpoints.md.
	def := httplimit.Defaults
	f.DurationVar(&cfg.Limits.HeaderTimeout, "header-timeout", def.HeaderTimeout, "how long a request's header may take to arrive")
	f.DurationVar(&cfg.Limits.IdleTimeout, "idle-timeout", def.IdleTimeout, "how long a kept-alive connection may wait for its next request")
	f.StringVar(&headerBytes, "max-header-bytes", "64KiB", "largest request header (431 over it)")
	f.IntVar(&cfg.Limits.MaxHeaders, "max-headers", def.MaxHeaders, "most header fields in a request (431 over it)")
	f.DurationVar(&cfg.Limits.BodyGrace, "body-grace", def.BodyGrace, "how long a request body may wait for its next bytes, beyond what --body-min-rate allows (408 past it)")
	f.StringVar(&bodyRate, "body-min-rate", "1KiB", "bytes a second a request body must keep coming at, on average (408 below it)")
	f.IntVar(&cfg.Limits.MaxConns, "max-conns", def.MaxConns, "most connections open at once (503 over it; negative: no limit)")
	f.IntVar(&cfg.Limits.MaxConnsPerAddr, "max-conns-per-addr", def.MaxConnsPerAddr, "most connections open at once from one client address (429 over it; negative: no limit)")
	f.StringVar(&epBody, "endpoint-max-body", "16MiB", "largest body of a scoring request (413 over it)")
	f.StringVar(&epBuffered, "endpoint-max-buffered", "64MiB", "most bytes of scoring requests' bodies the gateway holds at once (429 over it)")
	f.StringVar(&epBufferedAddr, "endpoint-max-buffered-per-addr", "32MiB", "most bytes of scoring requests' bodies the gateway holds at once for one client address (429 over it)")
	f.IntVar(&cfg.EndpointMaxRequests, "endpoint-max-requests", gateway.DefaultMaxRequests, "most scoring requests under way at once for one endpoint, bodies being read included (429 over it)")
	_ = cmd.MarkFlagRequired("data-dir")
	cmd.AddCommand(a.serverStatusCmd(), a.serverStopCmd())
	return cmd
}

func (a *app) runnerCmd() *cobra.Command {
	var inv invocation.Invocation
	cmd := &cobra.Command{
		Use:    "runner",
		Short:  "Run one attempt of a job (started by compute targets, not by people)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok := os.Getenv("FERRY_RUN_TOKEN")
			if tok == "" {
				return errors.New("FERRY_RUN_TOKEN is not set; runners are started by a compute target with a run token")
			}
			os.Unsetenv("FERRY_RUN_TOKEN")
			cfg, err := runner.ConfigFor(inv, tok, slog.New(slog.NewTextHandler(a.stderr, nil)))
			if err != nil {
				return err
			}
			// The runner is a daemon in its own session: a hang-up is no
			// reason to stop, and SIGTERM/SIGINT mean "cancel the job and
			// end after the grace".
			signal.Ignore(syscall.SIGHUP)
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
			cancel := make(chan struct{})
			go func() { <-sigs; close(cancel) }()
			cfg.Cancel = cancel
			if r := os.Getenv("FERRY_NODE_RANK"); r != "" {
				n, err := strconv.Atoi(r)
				if err != nil || n < 0 {
					return fmt.Errorf("FERRY_NODE_RANK %q is not a node rank", r)
				}
				cfg.Client.Rank = n
			}
			if cfg.RunAs != nil {
				// The job's PATH, and the one its environments' Python is
				// found in, hold only what the job's account can reach.
				os.Setenv("PATH", isolation.ReachablePath(os.Getenv("PATH"), cfg.RunAs))
			}
			return runner.Run(context.WithoutCancel(cmd.Context()), cfg)
		},
	}
	inv.Bind(cmd.Flags(), 10*time.Second, runner.DefaultGiveUpAfter)
	for _, n := range invocation.Required {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}
