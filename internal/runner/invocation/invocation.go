// Package invocation is what starts one runner: the options of the
// `ferry runner` command line, which the local target also hands, whole,
// to its long-lived executor. One type for both, so an attempt run in the
// executor runs with exactly the options a `ferry runner` process gets.
// It needs nothing of Ferry's, so the local target can build one without
// linking the runner.
package invocation

import (
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// EnvImageIsEnvironment names the variable that a target which starts
// the runner inside its job's environment image (Kubernetes) sets to that
// image: the runner then runs an image environment of that image in
// place, not in a container of its own.
const EnvImageIsEnvironment = "FERRY_IMAGE_IS_ENVIRONMENT"

// Invocation is one runner's options, less the run token (a secret: it
// travels in the environment or over the executor's private socket).
type Invocation struct {
	API string `json:"api"`
	// APIFile, on the server's own host, is the file the server records
	// its URL in (serverurl.FileName in its work dir): the runner reads it
	// when API cannot be reached, and follows a server that came back
	// elsewhere. "" = API only.
	APIFile      string        `json:"api_file,omitempty"`
	Job          string        `json:"job"`
	Attempt      int           `json:"attempt"`
	Dir          string        `json:"dir"`
	Cache        string        `json:"cache"`
	EnvCache     string        `json:"env_cache"`
	EnvCacheSize string        `json:"env_cache_size,omitempty"`
	CancelGrace  time.Duration `json:"cancel_grace,omitempty"`
	GiveUpAfter  time.Duration `json:"give_up_after,omitempty"`
	RunAs        string        `json:"run_as,omitempty"`
	// JobUIDs, with RunAs, makes each attempt run as a uid of its own
	// from this range (FIRST-LAST), RunAs naming it (isolation.Acquire).
	JobUIDs string `json:"job_uids,omitempty"`
}

// Required are the flags a runner cannot start without.
var Required = []string{"api", "job", "attempt", "dir", "cache", "env-cache"}

// Bind defines the runner's flags on fs, writing into inv; defaults are
// the runner's: cancelGrace, giveUpAfter.
func (inv *Invocation) Bind(fs *pflag.FlagSet, cancelGrace, giveUpAfter time.Duration) {
	fs.StringVar(&inv.API, "api", "", "workspace API URL")
	fs.StringVar(&inv.APIFile, "api-file", "", "file in which the server records its URL on this host; read when --api cannot be reached, to follow a server restarted at another address")
	fs.StringVar(&inv.Job, "job", "", "job name")
	fs.IntVar(&inv.Attempt, "attempt", 0, "attempt number")
	fs.StringVar(&inv.Dir, "dir", "", "this attempt's directory")
	fs.StringVar(&inv.Cache, "cache", "", "the node's blob cache directory")
	fs.StringVar(&inv.EnvCache, "env-cache", "", "the node's built environments")
	fs.StringVar(&inv.EnvCacheSize, "env-cache-size", "", "evict least recently used environments above this size (such as 50g)")
	fs.DurationVar(&inv.CancelGrace, "cancel-grace", cancelGrace, "SIGTERM to SIGKILL grace on cancel")
	fs.DurationVar(&inv.GiveUpAfter, "give-up-after", giveUpAfter, "stop the job and end, keeping the final report in the attempt's directory, when the server has not answered for this long")
	fs.StringVar(&inv.RunAs, "run-as", "", "account the job's processes run as (default: the runner's own)")
	fs.StringVar(&inv.JobUIDs, "job-uids", "", "with --run-as: run the job as a uid of its own from this range (FIRST-LAST), held for the attempt")
}

// Args is the `ferry runner` command line of inv; options left zero are
// left out, so the runner's defaults apply.
func (inv Invocation) Args() []string {
	args := []string{"runner", "--api", inv.API, "--job", inv.Job, "--attempt", strconv.Itoa(inv.Attempt),
		"--dir", inv.Dir, "--cache", inv.Cache, "--env-cache", inv.EnvCache}
	if inv.APIFile != "" {
		args = append(args, "--api-file", inv.APIFile)
	}
	if inv.EnvCacheSize != "" {
		args = append(args, "--env-cache-size", inv.EnvCacheSize)
	}
	if inv.CancelGrace != 0 {
		args = append(args, "--cancel-grace", inv.CancelGrace.String())
	}
	if inv.GiveUpAfter != 0 {
		args = append(args, "--give-up-after", inv.GiveUpAfter.String())
	}
	if inv.RunAs != "" {
		args = append(args, "--run-as", inv.RunAs)
	}
	if inv.JobUIDs != "" {
		args = append(args, "--job-uids", inv.JobUIDs)
	}
	return args
}
