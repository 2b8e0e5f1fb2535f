package instance

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Ferry parses cron itself rather than importing a library: go.mod admits
// only the standard library and go-cmp, there is no well-kept
// standard-library-only cron package that handles time zones and DST the
// way start/stop schedules need, and the field needs only the classic five
// fields.

// horizon bounds the search for a schedule's next occurrence. Ten years
// covers the rarest expression ParseCron accepts ("0 0 29 2 *", which skips
// 2100 and so can wait eight years) and every recurrence ParseSchedules
// accepts (periods of at most a year).
const horizon = 10 * 366 * 24 * time.Hour

// Cron is a parsed five-field cron expression (minute, hour, day of month,
// month, day of week) bound to a time zone.
//
// Semantics are Vixie cron's: '*', lists (1,15), ranges (1-5), steps (*/15,
// 0-30/10, and 5/15 meaning 5-59/15), month names JAN…DEC and day names
// SUN…SAT (any case), Sunday as 0 or 7. When both day of month and day of
// week are restricted (neither starts with '*'), a day matches if either
// does; otherwise both must.
type Cron struct {
	expr                        string
	loc                         *time.Location
	minute, hour, dom, mon, dow uint64 // bit i set: value i matches
	domStar, dowStar            bool
}

// CronError says which field of a cron expression is wrong.
type CronError struct {
	Expr     string // the whole expression
	Position int    // 1-based field number, 0 for the expression as a whole
	Field    string // the field's name: minute, hour, day-of-month, month, day-of-week
	Text     string // the field as written
	Message  string
}

// Error formats the error as `cron "0 25 * * *": field 2 (hour) "25": …`.
func (e *CronError) Error() string {
	if e.Position == 0 {
		return fmt.Sprintf("cron %q: %s", e.Expr, e.Message)
	}
	return fmt.Sprintf("cron %q: field %d (%s) %q: %s", e.Expr, e.Position, e.Field, e.Text, e.Message)
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}

var cronFields = [5]cronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day-of-week", min: 0, max: 7, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// daysIn is the most days each month can have (February in a leap year).
var daysIn = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// ParseCron parses a five-field cron expression whose times are wall-clock
// times in loc (nil means UTC). It refuses an expression that can never
// fire, such as "0 0 31 2 *". Errors are *CronError.
func ParseCron(expr string, loc *time.Location) (*Cron, error) {
	if loc == nil {
		loc = time.UTC
	}
	c := &Cron{expr: strings.Join(strings.Fields(expr), " "), loc: loc}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return nil, &CronError{Expr: expr, Message: fmt.Sprintf("has %d fields; write five: minute hour day-of-month month day-of-week, e.g. \"0 18 * * 1-5\" (seconds and @-macros are not supported)", len(fields))}
	}
	sets := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.mon, &c.dow}
	for i, f := range fields {
		set, err := parseCronField(f, cronFields[i])
		if err != nil {
			return nil, &CronError{Expr: expr, Position: i + 1, Field: cronFields[i].name, Text: f, Message: err.Error()}
		}
		*sets[i] = set
	}
	if c.dow&(1<<7) != 0 { // 7 is another name for Sunday
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar = strings.HasPrefix(fields[2], "*")
	c.dowStar = strings.HasPrefix(fields[4], "*")
	if !c.domStar && c.dowStar && !c.someMonthHasDay() {
		return nil, &CronError{Expr: expr, Message: "no month in field 4 has a day in field 3, so it would never fire"}
	}
	return c, nil
}

func (c *Cron) someMonthHasDay() bool {
	for m := 1; m <= 12; m++ {
		if c.mon&(1<<m) != 0 && bits.TrailingZeros64(c.dom) <= daysIn[m] {
			return true
		}
	}
	return false
}

// parseCronField turns one field into a bit set of the values it matches.
func parseCronField(s string, f cronField) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("has an empty list item; separate values with single commas")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max-f.min+1 || !isDigits(stepText) {
				return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepText, f.max-f.min+1)
			}
			step = n
		}
		var lo, hi int
		switch a, b, isRange := strings.Cut(rng, "-"); {
		case rng == "*":
			lo, hi = f.min, f.max
		case isRange:
			var err error
			if lo, err = cronValue(a, f); err != nil {
				return 0, err
			}
			if hi, err = cronValue(b, f); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("range %s goes backwards; write the smaller value first", rng)
			}
		default:
			var err error
			if lo, err = cronValue(rng, f); err != nil {
				return 0, err
			}
			hi = lo
			if hasStep { // Vixie: "5/15" means "5-max/15"
				hi = f.max
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func cronValue(s string, f cronField) (int, error) {
	if isDigits(s) {
		n, err := strconv.Atoi(s)
		if err != nil || n < f.min || n > f.max {
			return 0, fmt.Errorf("%s is out of range %d-%d", s, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.min + i, nil
		}
	}
	switch {
	case s == "":
		return 0, fmt.Errorf("has a range or step with a value missing")
	case s == "?" || strings.ContainsAny(s, "LW#"):
		return 0, fmt.Errorf("%q is Quartz syntax, not supported; use *, numbers, ranges, lists and steps", s)
	case f.names != nil:
		return 0, fmt.Errorf("%q is not a number from %d to %d or a name %s…%s", s, f.min, f.max, strings.ToUpper(f.names[0]), strings.ToUpper(f.names[len(f.names)-1]))
	}
	return 0, fmt.Errorf("%q is not a number from %d to %d", s, f.min, f.max)
}

func isDigits(s string) bool {
	if s == "" || len(s) > 4 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// String returns the expression as parsed, with single spaces.
func (c *Cron) String() string { return c.expr }

// Location returns the time zone the expression's times are in.
func (c *Cron) Location() *time.Location { return c.loc }

func (c *Cron) dayMatches(d time.Time) bool {
	if c.mon&(1<<int(d.Month())) == 0 {
		return false
	}
	dom := c.dom&(1<<d.Day()) != 0
	dow := c.dow&(1<<int(d.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Next returns the first instant strictly after after at which the
// expression fires, or the zero time when there is none within ten years
// (which, for an expression ParseCron accepted, happens only near the end
// of time.Time's range).
//
// Times are wall-clock times in the expression's zone, and each matching
// wall-clock time fires once:
//   - a time skipped when clocks go forward (02:30 on the spring-forward
//     day in Los Angeles) fires at the first instant after the gap (03:00),
//     as Vixie cron does for jobs at a fixed time, so "stop at 02:30" still
//     stops the machine that night; several skipped times fire together;
//   - a time that occurs twice when clocks go back (01:30 on the fall-back
//     day) fires once, at its first occurrence.
func (c *Cron) Next(after time.Time) time.Time {
	return nextWall(after, c.loc, c.dayMatches, c.hour, c.minute)
}

// nextWall is the search shared by cron and recurrence triggers: the first
// instant after after whose wall-clock time in loc falls on a day accepted
// by dayOK, at an hour in hours and a minute in minutes (bit sets).
// Wall-clock times map to instants through resolve, which never decreases,
// so the search walks days and times in order and stops at the first that
// lands after after.
func nextWall(after time.Time, loc *time.Location, dayOK func(time.Time) bool, hours, minutes uint64) time.Time {
	a := after.In(loc)
	y, m, d := a.Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // a civil date, no zone
	end := day.Add(horizon)
	for first := true; !day.After(end); first = false {
		if dayOK(day) {
			for h := range 24 {
				if hours&(1<<h) == 0 || first && h < a.Hour() {
					continue
				}
				for mi := range 60 {
					if minutes&(1<<mi) == 0 || first && h == a.Hour() && mi < a.Minute() {
						continue
					}
					if t := resolve(day.Year(), day.Month(), day.Day(), h, mi, loc); t.After(after) {
						return t
					}
				}
			}
		}
		day = day.AddDate(0, 0, 1)
	}
	return time.Time{}
}

// resolve returns the instant of a wall-clock time in loc: the earlier of
// two when clocks going back make it occur twice, and the end of the gap
// when clocks going forward skip it. (time.Date leaves both cases
// unspecified, and in practice picks differently east and west of UTC.)
func resolve(y int, mo time.Month, d, h, mi int, loc *time.Location) time.Time {
	u := time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
	var best time.Time
	for _, probe := range [...]time.Duration{-30 * time.Hour, 0, 30 * time.Hour} {
		_, off := u.Add(probe).In(loc).Zone()
		t := u.Add(-time.Duration(off) * time.Second)
		w := t.In(loc)
		if w.Day() == d && w.Hour() == h && w.Minute() == mi && w.Second() == 0 && w.Month() == mo && w.Year() == y {
			if best.IsZero() || t.Before(best) {
				best = t
			}
		}
	}
	if !best.IsZero() {
		return best.In(loc)
	}
	// Skipped: read with the offset from before the gap, the time lands
	// after the transition, whose instant is the gap's end.
	_, off := u.Add(-30 * time.Hour).In(loc).Zone()
	t := u.Add(-time.Duration(off) * time.Second)
	if start, _ := t.In(loc).ZoneBounds(); !start.IsZero() && !start.After(t) {
		return start.In(loc)
	}
	return t.In(loc)
}
