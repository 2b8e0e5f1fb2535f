package slurm

import (
	"context"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/compute"
)

// inspectBatch bounds the job ids of one squeue command line.
const inspectBatch = 500

// squeueFormat is what Inspect asks squeue for: the id as Ferry's handles
// write it, the state's full name, the reason (why it pends) and the raw
// wait status of its batch script. JobArrayID is a job's id, or an array
// task's ARRAYID_TASK (JobID would be the array's id for every task still
// pending). Widths are squeue's padding, trimmed again by parseSqueue; the
// reason's is wide enough not to cut one.
const squeueFormat = "JobArrayID:24|,State:24|,Reason:200|,exit_code:12|"

// Inspect implements compute.Inspector without slurmdbd, with one squeue
// for up to 500 ids, job ids and array tasks alike: with --states=all it
// lists every job slurmctld still keeps, pending, running or ended (for
// MinJobAge after its end, 300 s by default), which are exactly the jobs
// `scontrol show job` would find, and it gives the ended ones' exit status
// as well; -r lists an array's pending tasks one a line, as their own
// handles. Handles Slurm does not know are left out of the answer
// (PhaseGone).
func (t *Target) Inspect(ctx context.Context, hs []compute.Handle) (map[compute.Handle]compute.EngineState, error) {
	res := map[compute.Handle]compute.EngineState{}
	var ids []string
	seen := map[string]bool{}
	for _, h := range hs {
		if id := string(h); handleRe().MatchString(id) && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for start := 0; start < len(ids); start += inspectBatch {
		chunk := ids[start:min(start+inspectBatch, len(ids))]
		out, err := t.host.run(ctx, "squeue -h -r --states=all -j "+strings.Join(chunk, ",")+" -O '"+squeueFormat+"'", nil)
		if err != nil && !alreadyGone(err) { // all of them unknown: "Invalid job id"
			return nil, err
		}
		for id, r := range parseSqueue(out) {
			if seen[id] {
				res[compute.Handle(id)] = r.state()
			}
		}
	}
	return res, nil
}

// jobRow is what Slurm says of one job.
type jobRow struct {
	State  string // JobState: PENDING, RUNNING, COMPLETED, ...
	Reason string
	Status string // the batch script's wait status, as waitpid gives it
}

// parseSqueue reads squeue's lines in squeueFormat.
func parseSqueue(out []byte) map[string]jobRow {
	rows := map[string]jobRow{}
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 5 {
			continue
		}
		id := strings.TrimSpace(f[0])
		if !handleRe().MatchString(id) {
			continue
		}
		rows[id] = jobRow{State: strings.TrimSpace(f[1]), Reason: strings.TrimSpace(strings.Join(f[2:len(f)-2], "|")),
			Status: strings.TrimSpace(f[len(f)-2])}
	}
	return rows
}

// state maps a job's Slurm state to the engine state Ferry acts on.
// Unknown states are PhaseGone: Ferry then goes by what the runner said,
// or its lease.
func (r jobRow) state() compute.EngineState {
	ended := func(outcome string) compute.EngineState {
		return compute.EngineState{Phase: compute.PhaseEnded, Reason: r.State, Outcome: outcome, ExitCode: r.exitCode()}
	}
	switch r.State {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD":
		// CONFIGURING: nodes are being booted for it; the runner has not
		// started, so it waits as a pending job does.
		reason := r.Reason
		if r.State != "PENDING" || reason == "" || reason == "None" {
			reason = r.State
		}
		return compute.EngineState{Phase: compute.PhasePending, Reason: reason}
	case "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED":
		return compute.EngineState{Phase: compute.PhaseRunning, Reason: r.State}
	case "COMPLETED":
		return ended("Completed")
	case "CANCELLED":
		return ended("Canceled")
	case "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT":
		return ended("Failed")
	case "PREEMPTED":
		s := ended("Failed")
		s.Requeue = true
		return s
	}
	return compute.EngineState{Phase: compute.PhaseGone, Reason: r.State}
}

// exitCode reads the wait status: the exit code, or 128+signal for a
// script killed by a signal, as a shell reports it. nil when Slurm gave
// none.
func (r jobRow) exitCode() *int {
	st, err := strconv.Atoi(r.Status)
	if err != nil || st < 0 || st > 0xffff {
		return nil
	}
	code := (st >> 8) & 0xff
	if sig := st & 0x7f; sig != 0 {
		code = 128 + sig
	}
	return &code
}
