package instance

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/spec"
)

// fromYAML decodes a schedules or setup_scripts block as the spec package
// leaves it: YAML's ints, or JSON's float64s when viaJSON is set.
func fromYAML(t *testing.T, src string, viaJSON bool) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(src), &m); err != nil {
		t.Fatal(err)
	}
	if viaJSON {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m = nil
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// scheduleView is what the tests compare of a Schedule: its zone by name
// and its cron by text.
type scheduleView struct {
	Action     Action
	Enabled    bool
	Cron       string
	Recurrence *Recurrence
	StartTime  string
	TimeZone   string
	Location   string
}

func view(ss []Schedule) []scheduleView {
	var out []scheduleView
	for _, s := range ss {
		v := scheduleView{Action: s.Action, Enabled: s.Enabled, Recurrence: s.Trigger.Recurrence, TimeZone: s.Trigger.TimeZone, Location: s.Trigger.Location.String()}
		if s.Trigger.Cron != nil {
			v.Cron = s.Trigger.Cron.String()
		}
		if !s.Trigger.StartTime.IsZero() {
			v.StartTime = s.Trigger.StartTime.Format(time.RFC3339)
		}
		out = append(out, v)
	}
	return out
}

const schedulesYAML = `
compute_start_stop:
  - action: stop
    trigger:
      type: cron
      expression: "0 18 * * 1-5"
      time_zone: Pacific Standard Time
  - action: start
    state: disabled
    trigger:
      type: cron
      expression: "0 8 * * MON-FRI"
      start_time: "2026-07-01T00:00:00"
      time_zone: Europe/Berlin
  - action: start
    state: enabled
    trigger:
      type: recurrence
      frequency: week
      interval: 2
      start_time: "2026-07-06T00:00:00"
      time_zone: W. Europe Standard Time
      schedule:
        hours: [9, 7]
        minutes: 30
        week_days: [monday, Wed]
  - action: stop
    trigger:
      type: recurrence
      frequency: hour
      interval: 4
`

func TestParseSchedules(t *testing.T) {
	want := []scheduleView{
		{Action: ActionStop, Enabled: true, Cron: "0 18 * * 1-5", TimeZone: "Pacific Standard Time", Location: "America/Los_Angeles"},
		{Action: ActionStart, Enabled: false, Cron: "0 8 * * MON-FRI", StartTime: "2026-07-01T00:00:00+02:00", TimeZone: "Europe/Berlin", Location: "Europe/Berlin"},
		{Action: ActionStart, Enabled: true, Recurrence: &Recurrence{Frequency: Week, Interval: 2, Hours: []int{7, 9}, Minutes: []int{30}, WeekDays: []time.Weekday{time.Monday, time.Wednesday}},
			StartTime: "2026-07-06T00:00:00+02:00", TimeZone: "W. Europe Standard Time", Location: "Europe/Berlin"},
		{Action: ActionStop, Enabled: true, Recurrence: &Recurrence{Frequency: Hour, Interval: 4}, TimeZone: "UTC", Location: "UTC"},
	}
	for _, viaJSON := range []bool{false, true} {
		got, err := ParseSchedules(fromYAML(t, schedulesYAML, viaJSON))
		if err != nil {
			t.Fatalf("viaJSON=%v: %v", viaJSON, err)
		}
		if diff := cmp.Diff(want, view(got)); diff != "" {
			t.Errorf("viaJSON=%v: schedules (-want +got):\n%s", viaJSON, diff)
		}
	}
	if got, err := ParseSchedules(nil); err != nil || got != nil {
		t.Errorf("ParseSchedules(nil) = %v, %v; want nothing", got, err)
	}
}

func TestParseSchedulesErrors(t *testing.T) {
	const p = "schedules.compute_start_stop"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "compute_start: []", []string{"schedules.compute_start: unknown field; schedules has compute_start_stop"}},
		{"not a list", "compute_start_stop: {action: stop}", []string{p + ": must be a list of schedules, each with action and trigger"}},
		{"too many", `compute_start_stop: [` + strings.Repeat(`{action: stop, trigger: {type: cron, expression: "0 18 * * *"}},`, 5) + `]`,
			[]string{p + ": has 5 schedules; at most 4 are allowed"}},
		{"not a mapping", "compute_start_stop: [stop]", []string{p + "[0]: must be a mapping with action (start or stop) and trigger"}},
		{"missing action and trigger", "compute_start_stop: [{state: enabled}]", []string{
			p + "[0].action: is required: start or stop",
			p + `[0].trigger: is required: {type: cron, expression: "0 18 * * 1-5", time_zone: UTC} or {type: recurrence, frequency: day, interval: 1, schedule: {hours: [18], minutes: [0]}}`}},
		{"bad action, state, unknown field", `compute_start_stop: [{action: pause, state: on, when: now, trigger: {type: cron, expression: "0 18 * * *"}}]`, []string{
			p + "[0].when: unknown field; known here: action, state, trigger",
			p + `[0].action: must be start or stop, got "pause"`,
			p + `[0].state: must be enabled or disabled, got "on"`}},
		{"bad cron in the second", `compute_start_stop:
  - {action: start, trigger: {type: cron, expression: "0 8 * * *"}}
  - {action: stop, trigger: {type: cron, expression: "0 25 * * *"}}`, []string{
			p + `[1].trigger.expression: cron "0 25 * * *": field 2 (hour) "25": 25 is out of range 0-23`}},
		{"missing expression", `compute_start_stop: [{action: stop, trigger: {type: cron}}]`, []string{
			p + `[0].trigger.expression: is required for a cron trigger: five fields, e.g. "0 18 * * 1-5" (18:00 on weekdays)`}},
		{"bad type", `compute_start_stop: [{action: stop, trigger: {type: weekly}}]`, []string{
			p + `[0].trigger.type: must be cron or recurrence, got "weekly"`}},
		{"bad zone and start time", `compute_start_stop: [{action: stop, trigger: {type: cron, expression: "0 18 * * *", time_zone: Pacific, start_time: tomorrow}}]`, []string{
			p + `[0].trigger.time_zone: unknown time zone "Pacific": write a Windows zone name as Azure does ("Pacific Standard Time", "W. Europe Standard Time", "UTC") or an IANA name ("America/Los_Angeles", "Europe/Berlin")`,
			p + `[0].trigger.start_time: must be a time such as "2026-07-16T21:00:00" (in time_zone) or "2026-07-16T21:00:00Z", got tomorrow`}},
		{"cron with recurrence fields", `compute_start_stop: [{action: stop, trigger: {type: cron, expression: "0 18 * * *", frequency: day}}]`, []string{
			p + "[0].trigger.frequency: unknown field; known here: type, expression, start_time, time_zone"}},
		{"recurrence without frequency and interval", `compute_start_stop: [{action: stop, trigger: {type: recurrence}}]`, []string{
			p + "[0].trigger.frequency: is required: minute, hour, day, week or month",
			p + "[0].trigger.interval: is required: a whole number ≥ 1, e.g. 1 for every day"}},
		{"recurrence bad values", `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: fortnight, interval: 1.5}}]`, []string{
			p + `[0].trigger.frequency: must be minute, hour, day, week or month, got "fortnight"`,
			p + "[0].trigger.interval: must be a whole number ≥ 1"}},
		{"interval over a year", `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: week, interval: 53}}]`, []string{
			p + "[0].trigger.interval: must be at most 52 for frequency week (a period of at most a year), got 53"}},
		{"schedule with hourly", `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: hour, interval: 2, schedule: {minutes: [0]}}}]`, []string{
			p + "[0].trigger.schedule: applies to frequency day, week or month; a hour recurrence counts from start_time"}},
		{"schedule values", `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: week, interval: 1, schedule: {hours: [9, 24], minutes: -1, week_days: [monday, someday], month_days: [1], seconds: [0]}}}]`, []string{
			p + "[0].trigger.schedule.seconds: unknown field; known here: hours, minutes, week_days, month_days",
			p + "[0].trigger.schedule.hours[1]: must be a whole number from 0 to 23, got 24",
			p + "[0].trigger.schedule.minutes: must be a whole number from 0 to 59, got -1",
			p + "[0].trigger.schedule.month_days: applies to frequency month; use week_days for week",
			p + "[0].trigger.schedule.week_days[1]: must be a day of the week such as Monday (or mon), got someday"}},
		{"never fires", `compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: month, interval: 12, start_time: "2026-02-01T00:00:00", schedule: {month_days: [30]}}}]`, []string{
			p + "[0].trigger: never fires: no day within ten years matches its schedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSchedules(fromYAML(t, tt.yaml, false))
			var es spec.Errors
			if !errors.As(err, &es) {
				t.Fatalf("error = %v; want a spec.Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecurrenceNext(t *testing.T) {
	tests := []struct {
		name, yaml, after string
		want              []string
	}{
		{"daily at 17:30 Pacific", `{type: recurrence, frequency: day, interval: 1, time_zone: Pacific Standard Time, schedule: {hours: 17, minutes: 30}}`,
			"2026-03-07T18:00:00-08:00", []string{"2026-03-08T17:30:00-07:00", "2026-03-09T17:30:00-07:00"}},
		{"every third day from start_time", `{type: recurrence, frequency: day, interval: 3, start_time: "2026-03-01T08:15:00", time_zone: UTC}`,
			"2026-01-01T00:00:00Z", []string{"2026-03-01T08:15:00Z", "2026-03-04T08:15:00Z", "2026-03-07T08:15:00Z"}},
		{"day frequency limited to weekdays", `{type: recurrence, frequency: day, interval: 1, start_time: "2026-03-06T00:00:00", schedule: {hours: [8], minutes: [0], week_days: [Monday, Friday]}}`,
			"2026-03-06T09:00:00Z", []string{"2026-03-09T08:00:00Z", "2026-03-13T08:00:00Z"}},
		{"every other week on Monday and Wednesday in Berlin", `{type: recurrence, frequency: week, interval: 2, start_time: "2026-07-06T00:00:00", time_zone: W. Europe Standard Time, schedule: {hours: [7, 9], minutes: [30], week_days: [monday, wed]}}`,
			"2026-07-06T08:00:00+02:00", []string{"2026-07-06T09:30:00+02:00", "2026-07-08T07:30:00+02:00", "2026-07-08T09:30:00+02:00", "2026-07-20T07:30:00+02:00"}},
		{"weekly defaults to start_time's weekday and time", `{type: recurrence, frequency: week, interval: 1, start_time: "2026-03-04T19:45:00", time_zone: UTC}`,
			"2026-03-05T00:00:00Z", []string{"2026-03-11T19:45:00Z"}},
		{"monthly on the 1st and 31st", `{type: recurrence, frequency: month, interval: 1, start_time: "2026-01-01T00:00:00", schedule: {hours: [6], minutes: [0], month_days: [1, 31]}}`,
			"2026-03-31T07:00:00Z", []string{"2026-04-01T06:00:00Z", "2026-05-01T06:00:00Z", "2026-05-31T06:00:00Z"}},
		{"every 90 minutes of elapsed time across spring forward", `{type: recurrence, frequency: minute, interval: 90, start_time: "2026-03-08T00:00:00", time_zone: America/Los_Angeles}`,
			"2026-03-08T00:00:00-08:00", []string{"2026-03-08T01:30:00-08:00", "2026-03-08T04:00:00-07:00"}},
		{"every 4 hours from the epoch", `{type: recurrence, frequency: hour, interval: 4}`,
			"2026-03-08T01:00:00Z", []string{"2026-03-08T04:00:00Z", "2026-03-08T08:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fromYAML(t, "compute_start_stop: [{action: stop, trigger: "+tt.yaml+"}]", true)
			ss, err := ParseSchedules(m)
			if err != nil {
				t.Fatal(err)
			}
			after := mustTime(t, tt.after)
			var got, want []time.Time
			for _, w := range tt.want {
				after = ss[0].Trigger.Next(after)
				got = append(got, after)
				want = append(want, mustTime(t, w))
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(time.Time.Equal)); diff != "" {
				t.Errorf("occurrences (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCronStartTime(t *testing.T) {
	ss, err := ParseSchedules(fromYAML(t, `compute_start_stop: [{action: stop, trigger: {type: cron, expression: "0 18 * * *", start_time: "2026-07-01T00:00:00", time_zone: Tokyo Standard Time}}]`, false))
	if err != nil {
		t.Fatal(err)
	}
	got := ss[0].Trigger.Next(mustTime(t, "2026-01-01T00:00:00Z"))
	if want := mustTime(t, "2026-07-01T18:00:00+09:00"); !got.Equal(want) {
		t.Errorf("Next = %v, want %v (nothing before start_time)", got, want)
	}
	if got, want := ss[0].String(), "stop: cron 0 18 * * * (Tokyo Standard Time)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
