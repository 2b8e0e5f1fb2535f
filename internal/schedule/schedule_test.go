package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// instants reads RFC 3339 instants for a test.
func instants(t *testing.T) func(string) time.Time {
	t.Helper()
	return func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestDueFiresLatestMissedOnce(t *testing.T) {
	at := instants(t)
	_, trig, err := Parse([]byte(`name: hourly
trigger:
  type: cron
  expression: "0 * * * *"
  start_time: "2026-07-01T00:00:00Z"
create_job: ./job.yml
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := Clock{}
	tests := []struct {
		name, next, now string
		ok              bool
		want            Firing
	}{
		{"not yet", "2026-07-01T10:00:00Z", "2026-07-01T09:59:59Z", false, Firing{}},
		{"on time", "2026-07-01T10:00:00Z", "2026-07-01T10:00:01Z", true,
			Firing{Occurrence: at("2026-07-01T10:00:00Z"), Next: at("2026-07-01T11:00:00Z")}},
		{"down for three hours: the latest only", "2026-07-01T10:00:00Z", "2026-07-01T13:30:00Z", true,
			Firing{Occurrence: at("2026-07-01T13:00:00Z"), Skipped: 3, Next: at("2026-07-01T14:00:00Z")}},
		{"ended", "0001-01-01T00:00:00Z", "2026-07-01T13:30:00Z", false, Firing{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := c.Due(trig, at(tt.next), at(tt.now))
			if ok != tt.ok {
				t.Fatalf("Due ok = %v, want %v", ok, tt.ok)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Due (-want +got):\n%s", d)
			}
		})
	}
}

// TestDueBoundsTheWalk: a minute schedule missed for a year is decided
// without walking every occurrence, and still fires the latest.
func TestDueBoundsTheWalk(t *testing.T) {
	at := instants(t)
	_, trig, err := Parse([]byte("name: m\ntrigger: {type: cron, expression: \"* * * * *\"}\ncreate_job: ./job.yml\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := Clock{}.Due(trig, at("2025-01-01T00:00:00Z"), at("2026-01-01T00:00:30Z"))
	if !ok || !got.Occurrence.Equal(at("2026-01-01T00:00:00Z")) || !got.Next.Equal(at("2026-01-01T00:01:00Z")) || got.Skipped < maxCatchUp {
		t.Errorf("Due after a year = %+v, %v; want the occurrence at 2026-01-01T00:00:00Z, next a minute later, over %d skipped", got, ok, maxCatchUp)
	}
}

func TestClockMinuteAndEndTime(t *testing.T) {
	at := instants(t)
	_, trig, err := Parse([]byte(`name: m
trigger:
  type: recurrence
  frequency: minute
  interval: 2
  start_time: "2026-07-01T00:00:00Z"
  end_time: "2026-07-01T00:00:10Z"
create_job: ./job.yml
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := Clock{Minute: time.Second}
	var got []time.Time
	for n := c.Next(trig, at("2026-06-30T00:00:00Z")); !n.IsZero(); n = c.Next(trig, n) {
		got = append(got, n)
	}
	want := []time.Time{at("2026-07-01T00:00:00Z"), at("2026-07-01T00:00:02Z"), at("2026-07-01T00:00:04Z"),
		at("2026-07-01T00:00:06Z"), at("2026-07-01T00:00:08Z"), at("2026-07-01T00:00:10Z")}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("occurrences of every 2 one-second minutes until end_time (-want +got):\n%s", d)
	}
	// A real minute is the trigger's own Next.
	if n := (Clock{}).Next(trig, at("2026-07-01T00:00:00Z")); !n.IsZero() {
		t.Errorf("with real minutes the next occurrence %s is past end_time and should be none", n)
	}
}

func TestParseNamesFieldAndLine(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"bad hour", "name: s\ntrigger:\n  type: cron\n  expression: \"0 25 * * *\"\ncreate_job: ./job.yml\n", "trigger.expression (line 4)"},
		{"unknown zone", "name: s\ntrigger:\n  type: cron\n  expression: \"0 1 * * *\"\n  time_zone: Nowhere\ncreate_job: ./job.yml\n", "trigger.time_zone (line 5)"},
		{"end before start", "name: s\ntrigger:\n  type: cron\n  expression: \"0 1 * * *\"\n  start_time: \"2026-07-02T00:00:00\"\n  end_time: \"2026-07-01T00:00:00\"\ncreate_job: ./job.yml\n", "trigger.end_time (line 6): is before start_time"},
		{"no job", "name: s\ntrigger: {type: cron, expression: \"0 1 * * *\"}\n", "create_job"},
		{"no trigger", "name: s\ncreate_job: ./job.yml\n", "trigger"},
		{"bad name", "name: \"no spaces\"\ntrigger: {type: cron, expression: \"0 1 * * *\"}\ncreate_job: ./job.yml\n", "name (line 1)"},
		{"unknown field", "name: s\ntrigger: {type: cron, expression: \"0 1 * * *\"}\ncreate_job: ./job.yml\nenabled: true\n", "enabled"},
		{"recurrence schedule on minutes", "name: s\ntrigger: {type: recurrence, frequency: minute, interval: 5, schedule: {hours: [1]}}\ncreate_job: ./job.yml\n", "trigger.schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.file), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestParseWindowsZone(t *testing.T) {
	f, trig, err := Parse([]byte(`name: nightly
display_name: Nightly
trigger:
  type: cron
  expression: "0 2 * * *"
  time_zone: "Pacific Standard Time"
create_job:
  job: ./job.yml
  experiment_name: nightly
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if trig.Location.String() != "America/Los_Angeles" || f.DisplayName != "Nightly" {
		t.Errorf("zone %s, display name %q; want America/Los_Angeles and Nightly", trig.Location, f.DisplayName)
	}
	n := trig.Next(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC); !n.Equal(want) {
		t.Errorf("next 02:00 Pacific after midnight UTC on July 1 = %s, want %s", n.UTC(), want)
	}
}

// FuzzParse feeds schedule files to the parser: it never panics, and a
// trigger it accepts gives occurrences that move forward.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name: s\ntrigger: {type: cron, expression: \"0 * * * *\", time_zone: UTC}\ncreate_job: ./job.yml\n",
		"name: s\ntrigger: {type: recurrence, frequency: week, interval: 2, schedule: {week_days: [monday, Friday], hours: [4, 5], minutes: [0, 30]}, start_time: \"2026-07-10T10:00:00\", end_time: \"2027-01-01T00:00:00Z\", time_zone: \"W. Europe Standard Time\"}\ncreate_job: azureml:old-job\n",
		"name: s\ntrigger: {type: recurrence, frequency: month, interval: 1, schedule: {month_days: [31]}}\ncreate_job: {command: echo hi}\n",
		"name: s\ntrigger: {type: cron, expression: \"*/7 1-5 29 2 MON-FRI\"}\ncreate_job: {job: ./j.yml, tags: {a: b}}\n",
		"trigger: [1]\ncreate_job: 3\n",
	} {
		f.Add([]byte(s))
	}
	from := time.Date(2026, 3, 8, 9, 59, 0, 0, time.UTC) // around a DST change
	f.Fuzz(func(t *testing.T, data []byte) {
		_, trig, err := Parse(data, nil)
		if err != nil {
			return
		}
		c := Clock{Minute: time.Second}
		prev := from
		for range 5 {
			n := c.Next(trig, prev)
			if n.IsZero() {
				break
			}
			if !n.After(prev) {
				t.Fatalf("Next(%s) = %s, not after it", prev, n)
			}
			prev = n
		}
		if fr, ok := c.Due(trig, c.Next(trig, from), prev.Add(time.Hour)); ok && fr.Occurrence.After(prev.Add(time.Hour)) {
			t.Fatalf("Due fired %s, after now", fr.Occurrence)
		}
	})
}
