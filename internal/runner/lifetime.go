package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// A runner does not live forever. It gives up when its server has not
// answered for GiveUpAfter (default a day): the job is stopped as on
// cancel, and the final report, which cannot be delivered, is written to
// FinalReportName in the attempt's folder for the server to collect, with
// the metrics queue beside it. SIGTERM stops the job with the cancel grace
// and leaves the runner a few seconds more to deliver its final report
// (and the job's metrics) before it writes it to the file instead and
// exits.

// FinalReportName is the final report a runner could not deliver, in its
// attempt's folder: a workspace.Report as JSON.
const FinalReportName = "final-report.json"

// DefaultGiveUpAfter is how long a runner waits for a silent server.
const DefaultGiveUpAfter = 24 * time.Hour

// termDeliver is how long a runner told to stop has, after the cancel
// grace, to deliver what it has to the server.
const termDeliver = 5 * time.Second

var (
	// errServerSilent ends a runner whose server has been silent too long.
	errServerSilent = errors.New("no answer from the server")
	// errTerminated ends a runner that was sent SIGTERM once its time to
	// report is over.
	errTerminated = errors.New("the runner was told to stop")
)

// heardClock is when the server last answered, in Unix nanoseconds.
type heardClock struct{ at atomic.Int64 }

func (h *heardClock) heard() { h.at.Store(time.Now().UnixNano()) }

func (h *heardClock) silence() time.Duration { return time.Since(time.Unix(0, h.at.Load())) }

// lifetime ends the runner (through end) when the server has been silent
// for GiveUpAfter, or once a runner told to stop has had the cancel grace
// and termDeliver. It returns when ctx is done.
func (r *runner) lifetime(ctx context.Context, end context.CancelCauseFunc, h *heardClock) {
	tick := time.NewTicker(min(r.cfg.GiveUpAfter/4, time.Second))
	defer tick.Stop()
	stop := r.cfg.Cancel
	var term <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			stop = nil
			t := time.NewTimer(r.cfg.CancelGrace + termDeliver)
			defer t.Stop()
			term = t.C
		case <-term:
			end(errTerminated)
			return
		case <-tick.C:
			if s := h.silence(); s > r.cfg.GiveUpAfter {
				r.log.Error("giving up: the server has not answered", "for", s.Round(time.Second), "give_up_after", r.cfg.GiveUpAfter)
				end(fmt.Errorf("%w for %s (--give-up-after %s)", errServerSilent, s.Round(time.Second), r.cfg.GiveUpAfter))
				return
			}
		}
	}
}

// gaveUp is the final report of a runner that gave up on its server: the
// job was stopped because of it, whatever it would have reported.
func gaveUp(final apitypes.Report, cause error) apitypes.Report {
	if !errors.Is(cause, errServerSilent) {
		return final
	}
	// The outputs it uploaded are kept with the report, for the server to
	// record when it collects it.
	return apitypes.Report{Status: apitypes.StatusFailed, Reason: "runner gave up on the server", ExitCode: final.ExitCode,
		Error:   fmt.Sprintf("the runner stopped the job and ended: %v; the job had reached: %s (%s)", cause, final.Status, final.Reason),
		Outputs: final.Outputs, Finalizing: final.Finalizing}
}

// keepFinalReport writes the final report to FinalReportName, whole or
// not at all (a temporary file renamed), for the server to collect.
func (r *runner) keepFinalReport(rep apitypes.Report) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.Dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(r.cfg.Dir, FinalReportName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
