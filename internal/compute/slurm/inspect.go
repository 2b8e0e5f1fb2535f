package slurm

import (
	"context"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/compute"
)

const (
	// inspectBatch bounds the job ids of one squeue command line.
	inspectBatch = 500
	// scontrolEach is how many ids Inspect asks scontrol about one by
	// one; for more it lists every job once.
	scontrolEach = 16
)

// Inspect implements compute.Inspector without slurmdbd: one squeue for
// the jobs Slurm still has queued or running, then, in one more command,
// `scontrol show job` for each id squeue did not list, which finds a
// finished job while slurmctld keeps it (MinJobAge, 300 s by default).
// Handles neither knows are left out of the answer (PhaseGone).
func (t *Target) Inspect(ctx context.Context, hs []compute.Handle) (map[compute.Handle]compute.EngineState, error) {
	res := map[compute.Handle]compute.EngineState{}
	var ids []string
	seen := map[string]bool{}
	for _, h := range hs {
		if id := string(h); handleRe.MatchString(id) && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for start := 0; start < len(ids); start += inspectBatch {
		chunk := ids[start:min(start+inspectBatch, len(ids))]
		// %T the state's full name, %r the reason (why it pends).
		out, err := t.host.run(ctx, "squeue -h -j "+strings.Join(chunk, ",")+" -o '%i|%T|%r'", nil)
		if err != nil && !alreadyGone(err) { // all of them unknown to squeue: "Invalid job id"
			return nil, err
		}
		for id, r := range parseSqueue(out) {
			if seen[id] {
				res[compute.Handle(id)] = r.state()
			}
		}
		var missing []string
		for _, id := range chunk {
			if _, ok := res[compute.Handle(id)]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			continue
		}
		// An id slurmctld has forgotten makes scontrol fail; the others
		// still print. Past a few ids, one listing of every job slurmctld
		// keeps costs less than a call for each.
		cmd := "for id in " + strings.Join(missing, " ") + "; do scontrol -o show job \"$id\" 2>/dev/null; done; true"
		if len(missing) > scontrolEach {
			cmd = "scontrol -o show job"
		}
		out, err = t.host.run(ctx, cmd, nil)
		if err != nil {
			return nil, err
		}
		for id, r := range parseScontrol(out) {
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
	Exit   string // ExitCode: "code:signal"; only scontrol has it
}

// parseSqueue reads `squeue -h -o '%i|%T|%r'` lines.
func parseSqueue(out []byte) map[string]jobRow {
	rows := map[string]jobRow{}
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "|", 3)
		if len(f) == 3 && handleRe.MatchString(f[0]) {
			rows[f[0]] = jobRow{State: f[1], Reason: f[2]}
		}
	}
	return rows
}

// parseScontrol reads `scontrol -o show job` lines: one job a line, as
// Key=Value fields. Only free-text fields Ferry does not read (Command,
// WorkDir, StdOut) may hold spaces, and the fields read here come before
// them.
func parseScontrol(out []byte) map[string]jobRow {
	rows := map[string]jobRow{}
	for line := range strings.SplitSeq(string(out), "\n") {
		var id string
		var r jobRow
		for _, kv := range strings.Fields(line) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			switch k {
			case "JobId":
				id = v
			case "JobState":
				r.State = v
			case "Reason":
				r.Reason = v
			case "ExitCode":
				r.Exit = v
			}
		}
		if handleRe.MatchString(id) {
			rows[id] = r
		}
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

// exitCode reads ExitCode "code:signal"; a job killed by a signal exits
// 128+signal, as a shell reports it. nil when Slurm gave none.
func (r jobRow) exitCode() *int {
	c, s, ok := strings.Cut(r.Exit, ":")
	code, err1 := strconv.Atoi(c)
	sig, err2 := strconv.Atoi(s)
	if !ok || err1 != nil || err2 != nil || code < 0 || code > 255 || sig < 0 || sig > 127 {
		return nil
	}
	if code == 0 && sig > 0 {
		code = 128 + sig
	}
	return &code
}
