package instance

import (
	"fmt"
	"time"
)

// Snapshot is what Decide knows about one instance at one instant.
type Snapshot struct {
	State State
	// Created is when the instance was made. Schedule occurrences before it
	// never fire, and recurrences without start_time count from it.
	Created time.Time
	// StartedAt is when the instance last became Running after being
	// created, started or restarted; idleness counts from it at the
	// earliest.
	StartedAt time.Time
	// LastActivity is the last time the instance was in use: a job ended,
	// a session or port-forward closed, or the agent reported activity.
	LastActivity time.Time
	Jobs         int // running jobs
	Sessions     int // open exec/ssh sessions
	PortForwards int // open port-forwards
	// IdleTimeBeforeShutdown is Config's; 0 turns idle shutdown off.
	IdleTimeBeforeShutdown time.Duration
	Schedules              []Schedule
	// LastFired[i] is the occurrence of Schedules[i] that last fired (as
	// Plan.Fired reported it); zero or missing when it never has. It is
	// what keeps an occurrence from firing twice, across restarts of the
	// server too.
	LastFired []time.Time
}

// Plan is Decide's answer.
type Plan struct {
	Action Action // ActionNone, ActionStart or ActionStop
	// Reason says why, for the instance's events and logs: "idle for
	// 15m0s with no job, session or port-forward", "schedule 1: stop: cron
	// 0 18 * * 1-5 (Pacific Standard Time)".
	Reason string
	// Cause is what the Action comes from: CauseSchedule or CauseIdle
	// (empty for ActionNone), so the loop can tell people "stopped by a
	// schedule" apart from "stopped after its idle time".
	Cause Cause
	// Fired are the schedule occurrences this decision used up. The loop
	// stores each At as LastFired[Schedule] once it has taken Action.
	Fired []Firing
	// Next is the earliest instant at which a decision could change with
	// nothing else happening: a schedule's next occurrence or the end of
	// the idle time. Zero when there is none. The loop sleeps until Next
	// or until the instance's state, jobs, sessions or forwards change.
	Next time.Time
}

// Cause is what a Plan's Action comes from.
type Cause string

// The causes of an action.
const (
	CauseSchedule Cause = "schedule"
	CauseIdle     Cause = "idle"
)

// Firing is one schedule occurrence: Schedules[Schedule] at At.
type Firing struct {
	Schedule int
	At       time.Time
}

// catchUpLimit bounds the walk from a schedule's last firing to now; it is
// only reached by schedules that fire every few minutes in a narrow window
// after a long outage, for which firing the last occurrence found is as
// good.
const catchUpLimit = 100000

// Decide is the reconciler's decision for one instance at now. The rules:
//
//   - Schedules: each enabled schedule's latest occurrence in (LastFired,
//     now] is due (occurrences before Created are not). When several are
//     due, the latest occurrence wins (the lowest index on a tie): it says
//     what the user wants now, so after an outage the instance ends up as
//     the last schedule left it. Disabled schedules are ignored.
//   - A due start on a stopped instance starts it; on one that is running
//     or on its way up it does nothing and is used up. A due stop on a
//     Running, JobRunning or SetupFailed instance stops it, except that
//     it waits for running jobs: unlike Azure, which stops anyway, a
//     scheduled stop never kills a job, and fires when the last one ends.
//     A schedule also waits while the instance is on its way to the state
//     it acts from (a stop while Starting, a start while Stopping).
//   - Idleness: a Running instance with no job, no session and no
//     port-forward stops once IdleTimeBeforeShutdown has passed since the
//     later of LastActivity and StartedAt (exactly then, not before).
//     Nothing stops for idleness while a job runs or a session or a
//     forward is open.
func Decide(s Snapshot, now time.Time) Plan {
	p := Plan{Action: ActionNone}
	busy := s.Jobs > 0 || s.State == JobRunning
	var due []Firing
	for i, sc := range s.Schedules {
		if !sc.Enabled {
			continue
		}
		t := sc.Trigger
		if t.Recurrence != nil && t.StartTime.IsZero() && !s.Created.IsZero() {
			t.StartTime = s.Created.Truncate(time.Minute)
		}
		base := s.Created
		if i < len(s.LastFired) && s.LastFired[i].After(base) {
			base = s.LastFired[i]
		}
		if at := lastOccurrence(t, base, now); !at.IsZero() {
			due = append(due, Firing{Schedule: i, At: at})
		}
		p.Next = earliest(p.Next, t.Next(now))
	}
	if len(due) > 0 {
		win := due[0]
		for _, d := range due[1:] {
			if d.At.After(win.At) {
				win = d
			}
		}
		sc := s.Schedules[win.Schedule]
		what := fmt.Sprintf("schedule %d: %s", win.Schedule, sc)
		consume := true
		switch {
		case sc.Action == ActionStop && (s.State == Running || s.State == JobRunning || s.State == SetupFailed):
			if busy {
				consume = false
				p.Reason = fmt.Sprintf("%s waits for %s to end", what, plural(max(s.Jobs, 1), "running job"))
			} else {
				p.Action, p.Reason, p.Cause = ActionStop, what, CauseSchedule
			}
		case sc.Action == ActionStop && (s.State == Creating || s.State == SettingUp || s.State == Starting || s.State == Restarting):
			consume = false
			p.Reason = fmt.Sprintf("%s waits until the instance is Running (it is %s)", what, s.State)
		case sc.Action == ActionStart && s.State == Stopped:
			p.Action, p.Reason, p.Cause = ActionStart, what, CauseSchedule
		case sc.Action == ActionStart && s.State == Stopping:
			consume = false
			p.Reason = fmt.Sprintf("%s waits until the instance is Stopped", what)
		default:
			p.Reason = fmt.Sprintf("%s: nothing to do, the instance is %s", what, s.State)
		}
		for _, d := range due {
			if consume || d != win {
				p.Fired = append(p.Fired, d)
			}
		}
		if p.Action != ActionNone {
			return p
		}
	}
	if s.IdleTimeBeforeShutdown <= 0 || s.State != Running {
		return p
	}
	if busy || s.Sessions > 0 || s.PortForwards > 0 {
		if p.Reason == "" {
			p.Reason = fmt.Sprintf("in use: %s, %s, %s", plural(s.Jobs, "job"), plural(s.Sessions, "session"), plural(s.PortForwards, "port-forward"))
		}
		return p
	}
	since := s.LastActivity
	if s.StartedAt.After(since) {
		since = s.StartedAt
	}
	if since.IsZero() {
		return p // idleness cannot be measured; the caller must set StartedAt
	}
	deadline := since.Add(s.IdleTimeBeforeShutdown)
	if now.Before(deadline) {
		p.Next = earliest(p.Next, deadline)
		return p
	}
	p.Action, p.Cause = ActionStop, CauseIdle
	p.Reason = fmt.Sprintf("idle for %s with no job, session or port-forward", now.Sub(since).Truncate(time.Second))
	return p
}

// lastOccurrence returns the trigger's latest occurrence in (base, now],
// or zero when there is none.
func lastOccurrence(t Trigger, base, now time.Time) time.Time {
	occ := t.Next(base)
	if occ.IsZero() || occ.After(now) {
		return time.Time{}
	}
	// Look back from now in growing windows, so that a schedule last fired
	// long ago is not walked occurrence by occurrence.
	for d := time.Minute; ; d *= 2 {
		from := now.Add(-d)
		if !from.After(base) || d > horizon {
			break
		}
		if o := t.Next(from); !o.IsZero() && !o.After(now) {
			occ = o
			break
		}
	}
	for range catchUpLimit {
		n := t.Next(occ)
		if n.IsZero() || n.After(now) {
			break
		}
		occ = n
	}
	return occ
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
