package instance

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// t0 is the tests' injected clock: instants are offsets from a Monday
// noon, UTC.
var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

func schedules(t *testing.T, yaml string) []Schedule {
	t.Helper()
	ss, err := ParseSchedules(fromYAML(t, yaml, false))
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func checkPlan(t *testing.T, want, got Plan) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmp.Comparer(time.Time.Equal), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

func TestDecideIdle(t *testing.T) {
	idle := 15 * time.Minute
	base := Snapshot{State: Running, Created: t0.Add(-time.Hour), StartedAt: t0, LastActivity: t0.Add(-time.Hour), IdleTimeBeforeShutdown: idle}
	tests := []struct {
		name string
		s    func(s *Snapshot)
		now  time.Time
		want Plan
	}{
		{"just before the idle time", nil, t0.Add(idle - time.Nanosecond),
			Plan{Action: ActionNone, Next: t0.Add(idle)}},
		{"exactly the idle time", nil, t0.Add(idle),
			Plan{Action: ActionStop, Cause: CauseIdle, Reason: "idle for 15m0s with no job, session or port-forward"}},
		{"long idle", nil, t0.Add(3 * time.Hour),
			Plan{Action: ActionStop, Cause: CauseIdle, Reason: "idle for 3h0m0s with no job, session or port-forward"}},
		{"counts from the later activity", func(s *Snapshot) { s.LastActivity = t0.Add(10 * time.Minute) }, t0.Add(idle),
			Plan{Action: ActionNone, Next: t0.Add(25 * time.Minute)}},
		{"counts from the restart", func(s *Snapshot) { s.StartedAt = t0.Add(5 * time.Minute) }, t0.Add(idle),
			Plan{Action: ActionNone, Next: t0.Add(20 * time.Minute)}},
		{"a job runs", func(s *Snapshot) { s.State, s.Jobs = JobRunning, 1 }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone}},
		{"a job is counted while the state lags", func(s *Snapshot) { s.Jobs = 2 }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone, Reason: "in use: 2 jobs, 0 sessions, 0 port-forwards"}},
		{"a session is open", func(s *Snapshot) { s.Sessions = 1 }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone, Reason: "in use: 0 jobs, 1 session, 0 port-forwards"}},
		{"a port-forward is open", func(s *Snapshot) { s.PortForwards = 1 }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone, Reason: "in use: 0 jobs, 0 sessions, 1 port-forward"}},
		{"idle shutdown off", func(s *Snapshot) { s.IdleTimeBeforeShutdown = 0 }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone}},
		{"already stopped", func(s *Snapshot) { s.State = Stopped }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone}},
		{"still setting up", func(s *Snapshot) { s.State = SettingUp }, t0.Add(10 * time.Hour),
			Plan{Action: ActionNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			if tt.s != nil {
				tt.s(&s)
			}
			checkPlan(t, tt.want, Decide(s, tt.now))
		})
	}
}

// TestDecideIdleLoop drives Decide as the reconciler would: sleep until
// Plan.Next, apply the plan, and see the instance stop exactly at the end
// of its idle time, once the last session closes.
func TestDecideIdleLoop(t *testing.T) {
	s := Snapshot{State: Running, Created: t0, StartedAt: t0, IdleTimeBeforeShutdown: 20 * time.Minute, Sessions: 1}
	now := t0
	if p := Decide(s, now); p.Action != ActionNone || !p.Next.IsZero() {
		t.Fatalf("with a session open: %+v", p)
	}
	now = t0.Add(50 * time.Minute) // the session closes
	s.Sessions, s.LastActivity = 0, now
	p := Decide(s, now)
	if p.Action != ActionNone || !p.Next.Equal(now.Add(20*time.Minute)) {
		t.Fatalf("after the session closed: %+v", p)
	}
	now = p.Next
	checkPlan(t, Plan{Action: ActionStop, Cause: CauseIdle, Reason: "idle for 20m0s with no job, session or port-forward"}, Decide(s, now))
}

func TestDecideCronSchedules(t *testing.T) {
	ss := schedules(t, `
compute_start_stop:
  - action: stop
    trigger: {type: cron, expression: "0 18 * * 1-5", time_zone: Pacific Standard Time}
  - action: start
    trigger: {type: cron, expression: "0 8 * * 1-5", time_zone: Pacific Standard Time}
`)
	// Monday 2 March 2026 in Los Angeles is UTC-8.
	stopAt := time.Date(2026, 3, 2, 18, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
	startAt := time.Date(2026, 3, 3, 8, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
	// Created Monday 04:00 Pacific; the 08:00 start found it running.
	monStart := time.Date(2026, 3, 2, 8, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
	running := Snapshot{State: Running, Created: t0, StartedAt: t0, LastActivity: stopAt, Schedules: ss, LastFired: []time.Time{{}, monStart}}
	stopReason := "schedule 0: stop: cron 0 18 * * 1-5 (Pacific Standard Time)"
	startReason := "schedule 1: start: cron 0 8 * * 1-5 (Pacific Standard Time)"

	t.Run("before the stop", func(t *testing.T) {
		checkPlan(t, Plan{Action: ActionNone, Next: stopAt}, Decide(running, stopAt.Add(-time.Second)))
	})
	t.Run("stop at 18:00 Pacific", func(t *testing.T) {
		checkPlan(t, Plan{Action: ActionStop, Cause: CauseSchedule, Reason: stopReason, Fired: []Firing{{0, stopAt}}, Next: startAt},
			Decide(running, stopAt))
	})
	t.Run("no second stop after a restart", func(t *testing.T) {
		// The user started the instance again at 18:05; the server restarted
		// and decides again with the last firing it stored.
		s := running
		s.StartedAt, s.LastFired = stopAt.Add(5*time.Minute), []time.Time{stopAt, monStart}
		checkPlan(t, Plan{Action: ActionNone, Next: startAt}, Decide(s, stopAt.Add(6*time.Minute)))
	})
	t.Run("without the last firing it would stop again", func(t *testing.T) {
		s := running
		s.StartedAt = stopAt.Add(5 * time.Minute)
		checkPlan(t, Plan{Action: ActionStop, Cause: CauseSchedule, Reason: stopReason, Fired: []Firing{{0, stopAt}}, Next: startAt},
			Decide(s, stopAt.Add(6*time.Minute)))
	})
	t.Run("start at 08:00 Pacific", func(t *testing.T) {
		s := Snapshot{State: Stopped, Created: t0, Schedules: ss, LastFired: []time.Time{stopAt, monStart}}
		checkPlan(t, Plan{Action: ActionStart, Cause: CauseSchedule, Reason: startReason, Fired: []Firing{{1, startAt}}, Next: startAt.Add(10 * time.Hour)},
			Decide(s, startAt))
	})
	t.Run("start on a running instance does nothing", func(t *testing.T) {
		s := running
		s.LastFired = []time.Time{stopAt, monStart}
		checkPlan(t, Plan{Action: ActionNone, Reason: startReason + ": nothing to do, the instance is Running",
			Fired: []Firing{{1, startAt}}, Next: startAt.Add(10 * time.Hour)}, Decide(s, startAt.Add(time.Minute)))
	})
	t.Run("stop waits for a running job", func(t *testing.T) {
		s := running
		s.State, s.Jobs = JobRunning, 1
		checkPlan(t, Plan{Action: ActionNone, Reason: stopReason + " waits for 1 running job to end", Next: startAt},
			Decide(s, stopAt))
		s.State, s.Jobs, s.LastActivity = Running, 0, stopAt.Add(40*time.Minute)
		checkPlan(t, Plan{Action: ActionStop, Cause: CauseSchedule, Reason: stopReason, Fired: []Firing{{0, stopAt}}, Next: startAt},
			Decide(s, stopAt.Add(40*time.Minute)))
	})
	t.Run("after an outage the latest occurrence wins", func(t *testing.T) {
		// Stopped since Friday; the server was down over the weekend
		// and comes back Monday 9 March at 09:00 Pacific (PDT by then).
		s := Snapshot{State: Stopped, Created: t0, Schedules: ss, LastFired: []time.Time{stopAt, startAt}}
		mon := time.Date(2026, 3, 9, 9, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
		friStop := time.Date(2026, 3, 6, 18, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
		monStart := time.Date(2026, 3, 9, 8, 0, 0, 0, mustZone(t, "America/Los_Angeles"))
		checkPlan(t, Plan{Action: ActionStart, Cause: CauseSchedule, Reason: startReason, Fired: []Firing{{0, friStop}, {1, monStart}}, Next: mon.Add(9 * time.Hour)},
			Decide(s, mon))
	})
	t.Run("disabled schedule ignored", func(t *testing.T) {
		s := running
		s.Schedules = append([]Schedule(nil), ss...)
		s.Schedules[0].Enabled = false
		checkPlan(t, Plan{Action: ActionNone, Next: startAt}, Decide(s, stopAt))
	})
	t.Run("occurrences before creation do not fire", func(t *testing.T) {
		s := running
		s.Created, s.StartedAt = stopAt.Add(time.Minute), stopAt.Add(time.Minute)
		checkPlan(t, Plan{Action: ActionNone, Next: startAt}, Decide(s, stopAt.Add(2*time.Minute)))
	})
	t.Run("stop waits while the instance starts", func(t *testing.T) {
		s := running
		s.State = Starting
		checkPlan(t, Plan{Action: ActionNone, Reason: stopReason + " waits until the instance is Running (it is Starting)", Next: startAt},
			Decide(s, stopAt))
	})
	t.Run("start waits while the instance stops", func(t *testing.T) {
		s := running
		s.State, s.LastFired = Stopping, []time.Time{stopAt, monStart}
		checkPlan(t, Plan{Action: ActionNone, Reason: startReason + " waits until the instance is Stopped", Next: startAt.Add(10 * time.Hour)},
			Decide(s, startAt))
	})
}

func TestDecideScheduleBeatsIdleAndNext(t *testing.T) {
	ss := schedules(t, `
compute_start_stop:
  - action: stop
    trigger: {type: recurrence, frequency: day, interval: 1, time_zone: Europe/Berlin, schedule: {hours: [20], minutes: [0]}}
`)
	s := Snapshot{State: Running, Created: t0, StartedAt: t0, LastActivity: t0, IdleTimeBeforeShutdown: time.Hour, Schedules: ss}
	// 20:00 in Berlin on 2 March is 19:00 UTC; the idle time ends first.
	checkPlan(t, Plan{Action: ActionNone, Next: t0.Add(time.Hour)}, Decide(s, t0.Add(time.Minute)))
	s.LastActivity = t0.Add(6*time.Hour + 30*time.Minute)
	checkPlan(t, Plan{Action: ActionNone, Next: t0.Add(7 * time.Hour)}, Decide(s, t0.Add(6*time.Hour+31*time.Minute)))
	checkPlan(t, Plan{Action: ActionStop, Cause: CauseSchedule, Reason: "schedule 0: stop: every 1 day at hours 20 minutes 0 (Europe/Berlin)", Fired: []Firing{{0, t0.Add(7 * time.Hour)}}, Next: t0.Add(31 * time.Hour)},
		Decide(s, t0.Add(7*time.Hour)))
}

func TestDecideRecurrenceCountsFromCreation(t *testing.T) {
	// Every other day, no start_time: Azure counts from the schedule's
	// creation, Decide from the instance's, at its time of day.
	ss := schedules(t, `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: day, interval: 2}}]`)
	created := t0.Add(-24*time.Hour + 30*time.Second) // Sunday 12:00:30
	s := Snapshot{State: Running, Created: created, StartedAt: created, Schedules: ss}
	checkPlan(t, Plan{Action: ActionNone, Next: t0.Add(24 * time.Hour)}, Decide(s, t0))
	checkPlan(t, Plan{Action: ActionStop, Cause: CauseSchedule, Reason: "schedule 0: stop: every 2 days (UTC)", Fired: []Firing{{0, t0.Add(24 * time.Hour)}}, Next: t0.Add(72 * time.Hour)},
		Decide(s, t0.Add(24*time.Hour)))
}
