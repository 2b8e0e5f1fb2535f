package instance

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// MaxSchedules is how many compute_start_stop entries Azure ML allows.
const MaxSchedules = 4

// Action is what a schedule or a decision does to an instance.
type Action string

// The actions. ActionNone appears only in a Plan.
const (
	ActionNone  Action = "none"
	ActionStart Action = "start"
	ActionStop  Action = "stop"
)

// Frequency is the unit of a recurrence trigger's interval.
type Frequency string

// The frequencies Azure ML allows.
const (
	Minute Frequency = "minute"
	Hour   Frequency = "hour"
	Day    Frequency = "day"
	Week   Frequency = "week"
	Month  Frequency = "month"
)

// maxInterval keeps a recurrence's period to at most a year, which is
// plenty for starting and stopping a machine and keeps Next's search
// bounded.
var maxInterval = map[Frequency]int{Minute: 366 * 24 * 60, Hour: 366 * 24, Day: 366, Week: 52, Month: 12}

// Schedule is one entry of schedules.compute_start_stop.
type Schedule struct {
	Action  Action // ActionStart or ActionStop
	Enabled bool   // state: enabled (the default) or disabled
	Trigger Trigger
}

// Trigger says when a schedule fires: exactly one of Cron and Recurrence is
// set.
type Trigger struct {
	Cron       *Cron       // type: cron
	Recurrence *Recurrence // type: recurrence
	// StartTime, when set, is the first instant the trigger may fire at;
	// for a recurrence it is also where intervals count from and gives the
	// default hour, minute, weekday and day of month.
	StartTime time.Time
	TimeZone  string         // as written; "UTC" when left out
	Location  *time.Location // what TimeZone names
	// EndTime, when set, is the last instant the trigger may fire at. Only
	// job schedules (ParseJobTrigger) have one; an instance's schedules
	// run until they are removed.
	EndTime time.Time
}

// Recurrence is a trigger of type recurrence: every Interval units of
// Frequency; for day, week and month frequencies at the given Hours and
// Minutes, on WeekDays (day and week) or MonthDays (month). Empty lists take
// the start time's value.
type Recurrence struct {
	Frequency Frequency
	Interval  int
	Hours     []int
	Minutes   []int
	WeekDays  []time.Weekday
	MonthDays []int
}

// String describes the trigger for a reason or a listing:
// "cron 0 18 * * 1-5 (Pacific Standard Time)" or
// "every 2 weeks on Monday at 17:00 (UTC)".
func (t Trigger) String() string {
	if t.Cron != nil {
		return fmt.Sprintf("cron %s (%s)", t.Cron, t.TimeZone)
	}
	r := t.Recurrence
	var b strings.Builder
	fmt.Fprintf(&b, "every %d %s", r.Interval, r.Frequency)
	if r.Interval != 1 {
		b.WriteString("s")
	}
	if len(r.WeekDays) > 0 {
		names := make([]string, len(r.WeekDays))
		for i, d := range r.WeekDays {
			names[i] = d.String()
		}
		fmt.Fprintf(&b, " on %s", strings.Join(names, ", "))
	}
	if len(r.MonthDays) > 0 {
		fmt.Fprintf(&b, " on day %s", joinInts(r.MonthDays))
	}
	if len(r.Hours) > 0 || len(r.Minutes) > 0 {
		fmt.Fprintf(&b, " at hours %s minutes %s", joinInts(r.Hours), joinInts(r.Minutes))
	}
	fmt.Fprintf(&b, " (%s)", t.TimeZone)
	return b.String()
}

func joinInts(ns []int) string {
	if len(ns) == 0 {
		return "(start time's)"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// Next returns the first instant strictly after after, and not before
// StartTime, at which the trigger fires, or the zero time when there is
// none within ten years. Wall-clock times skipped or repeated by DST behave
// as in Cron.Next. A recurrence without StartTime counts its intervals from
// 1970-01-01 00:00 in its zone; Decide gives such a schedule the instance's
// creation time instead, as Azure counts from the schedule's creation.
func (t Trigger) Next(after time.Time) time.Time {
	next := t.next(after)
	if !t.EndTime.IsZero() && next.After(t.EndTime) {
		return time.Time{}
	}
	return next
}

func (t Trigger) next(after time.Time) time.Time {
	if !t.StartTime.IsZero() && after.Before(t.StartTime) {
		after = t.StartTime.Add(-time.Nanosecond)
	}
	if t.Cron != nil {
		return t.Cron.Next(after)
	}
	if t.Recurrence == nil {
		return time.Time{}
	}
	loc := t.Location
	if loc == nil {
		loc = time.UTC
	}
	anchor := time.Date(1970, 1, 1, 0, 0, 0, 0, loc)
	if !t.StartTime.IsZero() {
		anchor = t.StartTime.In(loc).Truncate(time.Minute)
	}
	return t.Recurrence.next(after, anchor, loc)
}

func (r *Recurrence) next(after, anchor time.Time, loc *time.Location) time.Time {
	switch r.Frequency {
	case Minute, Hour:
		// Elapsed time, not wall-clock time: "every 2 hours" stays two
		// hours apart across a DST change.
		period := time.Duration(r.Interval) * time.Minute
		if r.Frequency == Hour {
			period *= 60
		}
		if after.Before(anchor) {
			return anchor
		}
		return anchor.Add((after.Sub(anchor)/period + 1) * period)
	}
	hours, minutes := bitsOf(r.Hours, anchor.Hour()), bitsOf(r.Minutes, anchor.Minute())
	ay, am, ad := anchor.Date()
	aday := time.Date(ay, am, ad, 0, 0, 0, 0, time.UTC)
	weekdays := uint64(1) << anchor.Weekday()
	if len(r.WeekDays) > 0 {
		weekdays = 0
		for _, d := range r.WeekDays {
			weekdays |= 1 << d
		}
	}
	monthDays := bitsOf(r.MonthDays, ad)
	dayOK := func(d time.Time) bool {
		if d.Before(aday) {
			return false
		}
		switch r.Frequency {
		case Day:
			n := int(d.Sub(aday).Hours()/24 + 0.5)
			return n%r.Interval == 0 && (len(r.WeekDays) == 0 || weekdays&(1<<d.Weekday()) != 0)
		case Week:
			n := int(monday(d).Sub(monday(aday)).Hours()/24+0.5) / 7
			return n%r.Interval == 0 && weekdays&(1<<d.Weekday()) != 0
		default: // Month
			n := (d.Year()-ay)*12 + int(d.Month()-am)
			return n%r.Interval == 0 && monthDays&(1<<d.Day()) != 0
		}
	}
	if after.Before(anchor) {
		after = anchor.Add(-time.Nanosecond)
	}
	return nextWall(after, loc, dayOK, hours, minutes)
}

func monday(d time.Time) time.Time {
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

func bitsOf(ns []int, def int) uint64 {
	if len(ns) == 0 {
		return 1 << def
	}
	var set uint64
	for _, n := range ns {
		set |= 1 << n
	}
	return set
}

// String describes the schedule: "stop: cron 0 18 * * 1-5 (UTC)".
func (s Schedule) String() string {
	return fmt.Sprintf("%s: %s", s.Action, s.Trigger)
}

// ParseSchedules reads and checks the schedules field of a compute
// instance, as spec.Compute keeps it (a map decoded from YAML or JSON, in
// which numbers may be ints or float64s). It returns the compute_start_stop
// entries in order; problems are a spec.Errors naming each field by its
// path, e.g. "schedules.compute_start_stop[1].trigger.expression".
func ParseSchedules(m map[string]any) ([]Schedule, error) {
	var es spec.Errors
	add := func(field, format string, args ...any) {
		es = append(es, &spec.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	var out []Schedule
	for _, k := range sortedKeys(m) {
		if k != "compute_start_stop" {
			add("schedules."+k, "unknown field; schedules has compute_start_stop")
			continue
		}
		list, ok := m[k].([]any)
		if !ok {
			if m[k] != nil {
				add("schedules.compute_start_stop", "must be a list of schedules, each with action and trigger")
			}
			continue
		}
		if len(list) > MaxSchedules {
			add("schedules.compute_start_stop", "has %d schedules; at most %d are allowed", len(list), MaxSchedules)
		}
		for i, item := range list {
			if s, ok := parseSchedule(add, fmt.Sprintf("schedules.compute_start_stop[%d]", i), item); ok {
				out = append(out, s)
			}
		}
	}
	if len(es) > 0 {
		return nil, es
	}
	return out, nil
}

type addFunc func(field, format string, args ...any)

func parseSchedule(add addFunc, f string, item any) (Schedule, bool) {
	m, ok := item.(map[string]any)
	if !ok {
		add(f, "must be a mapping with action (start or stop) and trigger")
		return Schedule{}, false
	}
	bad := false
	fail := func(field, format string, args ...any) {
		bad = true
		add(field, format, args...)
	}
	unknownFields(fail, f, m, "action", "state", "trigger")
	s := Schedule{Enabled: true}
	switch a, _ := m["action"].(string); a {
	case "start", "stop":
		s.Action = Action(a)
	case "":
		fail(f+".action", "is required: start or stop")
	default:
		fail(f+".action", "must be start or stop, got %q", a)
	}
	switch st, _ := m["state"].(string); st {
	case "", "enabled":
	case "disabled":
		s.Enabled = false
	default:
		fail(f+".state", "must be enabled or disabled, got %q", st)
	}
	tm, ok := m["trigger"].(map[string]any)
	if !ok {
		fail(f+".trigger", "is required: {type: cron, expression: \"0 18 * * 1-5\", time_zone: UTC} or {type: recurrence, frequency: day, interval: 1, schedule: {hours: [18], minutes: [0]}}")
		return s, false
	}
	t, ok := parseTrigger(fail, f+".trigger", tm, false)
	s.Trigger = t
	return s, ok && !bad
}

// ParseJobTrigger reads and checks the trigger of a job schedule (Azure's
// schedule files): a cron or recurrence trigger as a compute instance's
// schedules have, plus end_time. f is the field's path for messages
// ("trigger"); problems are a spec.Errors naming each field.
func ParseJobTrigger(f string, m map[string]any) (Trigger, error) {
	var es spec.Errors
	add := func(field, format string, args ...any) {
		es = append(es, &spec.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	t, ok := parseTrigger(add, f, m, true)
	if !ok || len(es) > 0 {
		return Trigger{}, es
	}
	return t, nil
}

// parseTrigger reads a trigger; withEnd admits end_time (job schedules).
func parseTrigger(fail addFunc, f string, m map[string]any, withEnd bool) (Trigger, bool) {
	var t Trigger
	bad := false
	add := func(field, format string, args ...any) {
		bad = true
		fail(field, format, args...)
	}
	t.TimeZone, _ = m["time_zone"].(string)
	if t.TimeZone == "" {
		t.TimeZone = "UTC"
	}
	loc, err := LoadZone(t.TimeZone)
	if err != nil {
		add(f+".time_zone", "%v", err)
		loc = time.UTC
	}
	t.Location = loc
	if v, ok := m["start_time"]; ok && v != nil {
		st, err := parseStartTime(v, loc)
		if err != nil {
			add(f+".start_time", "%v", err)
		}
		t.StartTime = st
	}
	common := []string{"start_time", "time_zone"}
	if withEnd {
		common = append(common, "end_time")
		if v, ok := m["end_time"]; ok && v != nil {
			et, err := parseStartTime(v, loc)
			switch {
			case err != nil:
				add(f+".end_time", "%s", strings.Replace(err.Error(), "must be a time", "must be a time (the last instant it may fire)", 1))
			case !t.StartTime.IsZero() && et.Before(t.StartTime):
				add(f+".end_time", "is before start_time; the schedule would never fire")
			}
			t.EndTime = et
		}
	}
	switch typ, _ := m["type"].(string); typ {
	case "cron":
		unknownFields(add, f, m, append([]string{"type", "expression"}, common...)...)
		expr, _ := m["expression"].(string)
		if expr == "" {
			add(f+".expression", "is required for a cron trigger: five fields, e.g. \"0 18 * * 1-5\" (18:00 on weekdays)")
			break
		}
		c, err := ParseCron(expr, loc)
		if err != nil {
			add(f+".expression", "%v", err)
			break
		}
		t.Cron = c
	case "recurrence":
		unknownFields(add, f, m, append([]string{"type", "frequency", "interval", "schedule"}, common...)...)
		t.Recurrence = parseRecurrence(add, f, m)
		if !bad && t.next(t.StartTime).IsZero() {
			add(f, "never fires: no day within ten years matches its schedule")
		}
	case "":
		add(f+".type", "is required: cron or recurrence")
	default:
		add(f+".type", "must be cron or recurrence, got %q", typ)
	}
	return t, !bad
}

func parseRecurrence(add addFunc, f string, m map[string]any) *Recurrence {
	r := &Recurrence{}
	switch fr, _ := m["frequency"].(string); Frequency(fr) {
	case Minute, Hour, Day, Week, Month:
		r.Frequency = Frequency(fr)
	case "":
		add(f+".frequency", "is required: minute, hour, day, week or month")
	default:
		add(f+".frequency", "must be minute, hour, day, week or month, got %q", fr)
	}
	n, ok := asInt(m["interval"])
	switch hi := maxInterval[r.Frequency]; {
	case m["interval"] == nil:
		add(f+".interval", "is required: a whole number ≥ 1, e.g. 1 for every %s", orDay(r.Frequency))
	case !ok || n < 1:
		add(f+".interval", "must be a whole number ≥ 1")
	case hi > 0 && n > hi:
		add(f+".interval", "must be at most %d for frequency %s (a period of at most a year), got %d", hi, r.Frequency, n)
	default:
		r.Interval = n
	}
	sv, has := m["schedule"]
	if !has || sv == nil {
		return r
	}
	f += ".schedule"
	sm, ok := sv.(map[string]any)
	if !ok {
		add(f, "must be a mapping with hours, minutes, week_days or month_days")
		return r
	}
	if r.Frequency == Minute || r.Frequency == Hour {
		add(f, "applies to frequency day, week or month; a %s recurrence counts from start_time", r.Frequency)
		return r
	}
	unknownFields(add, f, sm, "hours", "minutes", "week_days", "month_days")
	r.Hours = intList(add, f+".hours", sm["hours"], 0, 23)
	r.Minutes = intList(add, f+".minutes", sm["minutes"], 0, 59)
	r.MonthDays = intList(add, f+".month_days", sm["month_days"], 1, 31)
	if len(r.MonthDays) > 0 && r.Frequency != Month {
		add(f+".month_days", "applies to frequency month; use week_days for %s", r.Frequency)
	}
	r.WeekDays = weekDays(add, f+".week_days", sm["week_days"])
	if len(r.WeekDays) > 0 && r.Frequency == Month {
		add(f+".week_days", "applies to frequency day or week; use month_days for month")
	}
	return r
}

func orDay(fr Frequency) Frequency {
	if fr == "" {
		return Day
	}
	return fr
}

// intList reads a number or a list of numbers from lo to hi, sorted and
// without repeats.
func intList(add addFunc, f string, v any, lo, hi int) []int {
	if v == nil {
		return nil
	}
	items, ok := v.([]any)
	if !ok {
		items = []any{v}
	}
	var out []int
	for i, it := range items {
		n, ok := asInt(it)
		if !ok || n < lo || n > hi {
			field := f
			if _, isList := v.([]any); isList {
				field = fmt.Sprintf("%s[%d]", f, i)
			}
			add(field, "must be a whole number from %d to %d, got %v", lo, hi, it)
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func weekDays(add addFunc, f string, v any) []time.Weekday {
	if v == nil {
		return nil
	}
	items, ok := v.([]any)
	if !ok {
		items = []any{v}
	}
	var out []time.Weekday
	for i, it := range items {
		s, _ := it.(string)
		d, ok := parseWeekday(s)
		if !ok {
			field := f
			if _, isList := v.([]any); isList {
				field = fmt.Sprintf("%s[%d]", f, i)
			}
			add(field, "must be a day of the week such as Monday (or mon), got %v", it)
			continue
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func parseWeekday(s string) (time.Weekday, bool) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if strings.EqualFold(s, d.String()) || strings.EqualFold(s, d.String()[:3]) {
			return d, true
		}
	}
	return 0, false
}

// startTimeLayouts are the forms start_time takes: Azure's
// "yyyy-MM-ddTHH:mm:ss", a wall-clock time in the trigger's zone, or an
// RFC 3339 instant with its own offset.
var startTimeLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02"}

func parseStartTime(v any, loc *time.Location) (time.Time, error) {
	switch v := v.(type) {
	case time.Time:
		return v, nil
	case string:
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t, nil
		}
		for _, layout := range startTimeLayouts {
			if t, err := time.ParseInLocation(layout, v, loc); err == nil {
				return resolve(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), loc).Add(time.Duration(t.Second()) * time.Second), nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("must be a time such as \"2026-07-16T21:00:00\" (in time_zone) or \"2026-07-16T21:00:00Z\", got %v", v)
}

// asInt reads a whole number as YAML (int) or JSON (float64) decoding
// leaves it.
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), n == int64(int(n))
	case uint64:
		return int(n), n <= math.MaxInt32
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > math.MaxInt32 {
			return 0, false
		}
		return int(n), true
	}
	return 0, false
}

func unknownFields(add addFunc, f string, m map[string]any, known ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(known, k) {
			add(f+"."+k, "unknown field; known here: %s", strings.Join(known, ", "))
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
