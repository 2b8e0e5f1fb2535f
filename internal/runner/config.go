package runner

import (
	"fmt"
	"log/slog"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
)

// ConfigFor is the runner's Config for inv and its run token: what
// `ferry runner` and the local executor (internal/executor) both run. The
// caller sets Cancel and, for the executor, Direct; a run-as account's
// PATH is the caller's to set (isolation.ReachablePath), once per process.
func ConfigFor(inv invocation.Invocation, runToken string, log *slog.Logger) (Config, error) {
	cfg := Config{
		Client: client.New(inv.API, runToken), Job: inv.Job, Attempt: inv.Attempt, Dir: inv.Dir,
		CacheDir: inv.Cache, EnvCacheDir: inv.EnvCache, APIURL: inv.API, APIFile: inv.APIFile, RunToken: runToken,
		CancelGrace: inv.CancelGrace, GiveUpAfter: inv.GiveUpAfter, Log: log,
	}
	if inv.APIFile != "" {
		file := inv.APIFile
		cfg.Client.FollowURLFile(file, func(from, to string) {
			log.Warn("the server is at another URL now; the runner calls it there", "from", from, "to", to, "file", file)
		}, func(err error) {
			log.Warn("cannot read the server's URL from its file; the runner keeps calling the URL it has", "err", err)
		})
	}
	if inv.RunAs != "" {
		u, err := isolation.Lookup(inv.RunAs)
		if err != nil {
			return Config{}, fmt.Errorf("--run-as: %w", err)
		}
		cfg.RunAs = u
	}
	if inv.JobUIDs != "" {
		if inv.RunAs == "" {
			return Config{}, fmt.Errorf("--job-uids needs --run-as: the account whose name the attempts' uids carry")
		}
		r, err := isolation.ParseUIDRange(inv.JobUIDs)
		if err != nil {
			return Config{}, fmt.Errorf("--job-uids: %w", err)
		}
		cfg.JobUIDs = &r
	}
	if inv.EnvCacheSize != "" {
		n, err := environment.ParseBytes(inv.EnvCacheSize)
		if err != nil {
			return Config{}, fmt.Errorf("--env-cache-size: %w", err)
		}
		cfg.EnvCacheMax = n
	}
	return cfg, nil
}
