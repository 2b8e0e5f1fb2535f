// Package compute defines compute targets: the places where job attempts run.
//
// A Target only knows how to get a runner onto compute (DESIGN.md section 3):
// the local target starts `ferry runner` processes on this machine, pool
// targets will hand assignments to agents, Slurm and Kubernetes will start
// the runner through their own schedulers. Everything a job does once it runs
// is the runner's business and the same on every target.
//
// Implementations live in sub-packages (compute/local, ...) and are wired in
// one explicit map by the server package.
package compute

import (
	"context"
	"errors"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// ErrNotSupported is wrapped by errors that say a target cannot do something
// a job asks for (a distribution, a GPU count, an image environment ...).
var ErrNotSupported = errors.New("not supported by this compute target")

// Launch is what a target needs to start one attempt of a job.
type Launch struct {
	Job      string // job name
	Attempt  int    // attempt number, fenced by the server
	APIURL   string // where the runner reaches the workspace API
	RunToken string // run-scoped token; secret, never log it
}

// Target runs job attempts.
//
// Admit is called at submit time with the job and its resolved environment
// and must refuse, with an error wrapping ErrNotSupported that names the
// field, every job the target cannot honour.
// Capacity is how many attempts may run at once. Launch starts a runner for
// the attempt and returns once it is started (not when the job ends); a
// returned error means nothing was started. Methods are safe for concurrent use.
type Target interface {
	Type() string
	Admit(job *spec.Job, env *environment.Spec) error
	Capacity() int
	Launch(ctx context.Context, l Launch) error
}

// FinalReports is an optional power of a target whose runners keep, on
// the target's machine, the final report they could not deliver (a runner
// that gave up on a silent server). FinalReport returns the report of an
// attempt as JSON, as the runner would have sent it, and true when there
// is one. The workspace asks before it fails a silent attempt as lost.
type FinalReports interface {
	FinalReport(job string, attempt int) ([]byte, bool)
}
