// Package schedule holds the pure logic of job schedules (Azure's schedule
// files, `ferry schedule create -f`): reading a schedule's trigger, and
// deciding, from the stored next-fire time and the clock, which
// occurrence a pass fires and when the next one is.
//
// Triggers are those of compute instances' start/stop schedules (package
// instance: five-field cron and recurrences in a time zone, with DST
// handled), plus end_time. Nothing here reads a clock or does I/O.
package schedule

import (
	"errors"
	"time"

	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Parse reads a schedule file, with `--set` overrides, and its trigger.
// Problems are a spec.Errors naming each field and its line.
func Parse(data []byte, sets []string) (*spec.ScheduleFile, instance.Trigger, error) {
	f, err := spec.ParseSchedule(data, sets)
	if err != nil {
		return nil, instance.Trigger{}, err
	}
	t, err := Trigger(f)
	if err != nil {
		var es spec.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				if e.Line == 0 {
					e.Line = spec.FieldLine(data, e.Field)
				}
			}
		}
		return nil, instance.Trigger{}, err
	}
	return f, t, nil
}

// Trigger reads and checks f's trigger.
func Trigger(f *spec.ScheduleFile) (instance.Trigger, error) {
	return instance.ParseJobTrigger("trigger", f.Trigger)
}

// Clock says how long the unit of a minute recurrence is: a minute, except
// in tests of the server, which shorten it to fire every few seconds of
// real time. Every other trigger keeps wall-clock time.
type Clock struct {
	Minute time.Duration // 0 means a minute
}

// Next is the first occurrence of t strictly after after, or the zero
// time when there is none (past end_time, or none within ten years).
func (c Clock) Next(t instance.Trigger, after time.Time) time.Time {
	r := t.Recurrence
	if r == nil || r.Frequency != instance.Minute || c.Minute <= 0 || c.Minute == time.Minute {
		return t.Next(after)
	}
	anchor := t.StartTime
	if anchor.IsZero() {
		anchor = time.Unix(0, 0)
	}
	period := time.Duration(r.Interval) * c.Minute
	next := anchor
	if !after.Before(anchor) {
		next = anchor.Add((after.Sub(anchor)/period + 1) * period)
	}
	if !t.EndTime.IsZero() && next.After(t.EndTime) {
		return time.Time{}
	}
	return next
}

// maxCatchUp bounds how many missed occurrences Due walks over to find the
// latest: a minute schedule missed for two months. Beyond it the walk
// starts again from an hour before now.
const maxCatchUp = 100_000

// Firing is what one pass does for a schedule whose next-fire time has
// come.
type Firing struct {
	// Occurrence is the occurrence to fire: the latest one not after now.
	// The occurrences between the stored next-fire time and it were
	// missed (the server was down) and are skipped: a schedule fires at
	// most one catch-up, as Azure's does.
	Occurrence time.Time
	// Skipped is how many missed occurrences Occurrence stands for
	// besides itself.
	Skipped int
	// Next is the occurrence after Occurrence, zero when there is none.
	Next time.Time
}

// Due says what to do for a schedule whose stored next-fire time is next,
// at now: ok is false when next has not come (or is zero, a schedule that
// has ended).
func (c Clock) Due(t instance.Trigger, next, now time.Time) (f Firing, ok bool) {
	if next.IsZero() || next.After(now) {
		return Firing{}, false
	}
	f.Occurrence = next
	for steps := 0; ; steps++ {
		if steps == maxCatchUp {
			// Jump to the occurrences of the last hour; what lies between
			// was missed all the same (Skipped then counts too few).
			if n := c.Next(t, now.Add(-time.Hour)); !n.IsZero() && !n.After(now) && n.After(f.Occurrence) {
				f.Occurrence = n
				f.Skipped++
			}
		}
		n := c.Next(t, f.Occurrence)
		if n.IsZero() || n.After(now) || steps > 2*maxCatchUp {
			f.Next = n
			return f, true
		}
		f.Occurrence = n
		f.Skipped++
	}
}
