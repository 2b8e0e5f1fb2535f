package instance

import (
	"math/bits"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func values(set uint64) []int {
	var out []int
	for set != 0 {
		v := bits.TrailingZeros64(set)
		out = append(out, v)
		set &^= 1 << v
	}
	return out
}

func span(lo, hi, step int) []int {
	var out []int
	for v := lo; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

func TestParseCron(t *testing.T) {
	type fields struct {
		Minute, Hour, Dom, Month, Dow []int
		DomStar, DowStar              bool
	}
	all := func(f fields) fields {
		if f.Minute == nil {
			f.Minute = span(0, 59, 1)
		}
		if f.Hour == nil {
			f.Hour = span(0, 23, 1)
		}
		if f.Dom == nil {
			f.Dom = span(1, 31, 1)
		}
		if f.Month == nil {
			f.Month = span(1, 12, 1)
		}
		if f.Dow == nil {
			f.Dow = span(0, 6, 1)
		}
		return f
	}
	tests := []struct {
		expr string
		want fields
	}{
		{"* * * * *", all(fields{DomStar: true, DowStar: true})},
		{"0 18 * * 1-5", all(fields{Minute: []int{0}, Hour: []int{18}, Dow: span(1, 5, 1), DomStar: true})},
		{"*/15 */6 * * *", all(fields{Minute: []int{0, 15, 30, 45}, Hour: []int{0, 6, 12, 18}, DomStar: true, DowStar: true})},
		{"5/20 1-10/3 * * *", all(fields{Minute: []int{5, 25, 45}, Hour: []int{1, 4, 7, 10}, DomStar: true, DowStar: true})},
		{"0,30 8,12-13 1,15 * *", all(fields{Minute: []int{0, 30}, Hour: []int{8, 12, 13}, Dom: []int{1, 15}, DowStar: true})},
		{"0 0 * JAN,jul-Sep MON-fri", all(fields{Minute: []int{0}, Hour: []int{0}, Month: []int{1, 7, 8, 9}, Dow: span(1, 5, 1), DomStar: true})},
		{"0 0 * * 7", all(fields{Minute: []int{0}, Hour: []int{0}, Dow: []int{0}, DomStar: true})},
		{"0 0 * * 5-7", all(fields{Minute: []int{0}, Hour: []int{0}, Dow: []int{0, 5, 6}, DomStar: true})},
		{"0 0 */2 * sun", all(fields{Minute: []int{0}, Hour: []int{0}, Dom: span(1, 31, 2), Dow: []int{0}, DomStar: true})},
		{"0 0 13 * 5", all(fields{Minute: []int{0}, Hour: []int{0}, Dom: []int{13}, Dow: []int{5}})},
		{"  0   18 * *   *  ", all(fields{Minute: []int{0}, Hour: []int{18}, DomStar: true, DowStar: true})},
		{"0 0 29 2 *", all(fields{Minute: []int{0}, Hour: []int{0}, Dom: []int{29}, Month: []int{2}, DowStar: true})},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			c, err := ParseCron(tt.expr, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := fields{values(c.minute), values(c.hour), values(c.dom), values(c.mon), values(c.dow), c.domStar, c.dowStar}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"", `cron "": has 0 fields; write five: minute hour day-of-month month day-of-week, e.g. "0 18 * * 1-5" (seconds and @-macros are not supported)`},
		{"0 0 18 * * *", `cron "0 0 18 * * *": has 6 fields; write five: minute hour day-of-month month day-of-week, e.g. "0 18 * * 1-5" (seconds and @-macros are not supported)`},
		{"@daily", `cron "@daily": has 1 fields; write five: minute hour day-of-month month day-of-week, e.g. "0 18 * * 1-5" (seconds and @-macros are not supported)`},
		{"60 * * * *", `cron "60 * * * *": field 1 (minute) "60": 60 is out of range 0-59`},
		{"0 25 * * *", `cron "0 25 * * *": field 2 (hour) "25": 25 is out of range 0-23`},
		{"0 0 0 * *", `cron "0 0 0 * *": field 3 (day-of-month) "0": 0 is out of range 1-31`},
		{"0 0 * 13 *", `cron "0 0 * 13 *": field 4 (month) "13": 13 is out of range 1-12`},
		{"0 0 * * 8", `cron "0 0 * * 8": field 5 (day-of-week) "8": 8 is out of range 0-7`},
		{"0 0 * * MOM", `cron "0 0 * * MOM": field 5 (day-of-week) "MOM": "MOM" is not a number from 0 to 7 or a name SUN…SAT`},
		{"0 0 * FOO *", `cron "0 0 * FOO *": field 4 (month) "FOO": "FOO" is not a number from 1 to 12 or a name JAN…DEC`},
		{"0 x * * *", `cron "0 x * * *": field 2 (hour) "x": "x" is not a number from 0 to 23`},
		{"0 5-2 * * *", `cron "0 5-2 * * *": field 2 (hour) "5-2": range 5-2 goes backwards; write the smaller value first`},
		{"*/0 * * * *", `cron "*/0 * * * *": field 1 (minute) "*/0": step "0" must be a number from 1 to 60`},
		{"*/61 * * * *", `cron "*/61 * * * *": field 1 (minute) "*/61": step "61" must be a number from 1 to 60`},
		{"*/-1 * * * *", `cron "*/-1 * * * *": field 1 (minute) "*/-1": step "-1" must be a number from 1 to 60`},
		{"1,,2 * * * *", `cron "1,,2 * * * *": field 1 (minute) "1,,2": has an empty list item; separate values with single commas`},
		{"0 1- * * *", `cron "0 1- * * *": field 2 (hour) "1-": has a range or step with a value missing`},
		{"-1 * * * *", `cron "-1 * * * *": field 1 (minute) "-1": has a range or step with a value missing`},
		{"0 0 ? * MON", `cron "0 0 ? * MON": field 3 (day-of-month) "?": "?" is Quartz syntax, not supported; use *, numbers, ranges, lists and steps`},
		{"0 0 L * *", `cron "0 0 L * *": field 3 (day-of-month) "L": "L" is Quartz syntax, not supported; use *, numbers, ranges, lists and steps`},
		{"0 0 31 2,4 *", `cron "0 0 31 2,4 *": no month in field 4 has a day in field 3, so it would never fire`},
		{"0 0 30 feb *", `cron "0 0 30 feb *": no month in field 4 has a day in field 3, so it would never fire`},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := ParseCron(tt.expr, nil)
			if err == nil {
				t.Fatalf("ParseCron(%q) succeeded; want an error", tt.expr)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
	// "0 0 30 2 1" is fine: with both day fields restricted, Mondays match.
	if _, err := ParseCron("0 0 30 2 1", nil); err != nil {
		t.Errorf("ParseCron(0 0 30 2 1): %v", err)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestCronNext(t *testing.T) {
	tests := []struct {
		name, expr, zone, after string
		want                    []string // successive occurrences
	}{
		{"weekdays at 18:00", "0 18 * * 1-5", "UTC", "2026-03-06T17:00:00Z", // a Friday
			[]string{"2026-03-06T18:00:00Z", "2026-03-09T18:00:00Z", "2026-03-10T18:00:00Z"}},
		{"strictly after", "0 18 * * *", "UTC", "2026-03-06T18:00:00Z",
			[]string{"2026-03-07T18:00:00Z"}},
		{"seconds of after are inside the minute", "30 9 * * *", "UTC", "2026-03-06T09:30:59Z",
			[]string{"2026-03-07T09:30:00Z"}},
		{"steps", "*/20 9 * * *", "UTC", "2026-03-06T09:05:00Z",
			[]string{"2026-03-06T09:20:00Z", "2026-03-06T09:40:00Z", "2026-03-07T09:00:00Z"}},
		{"day of month or day of week", "0 0 13 * 5", "UTC", "2026-03-01T00:00:00Z",
			[]string{"2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z", "2026-03-20T00:00:00Z", "2026-03-27T00:00:00Z", "2026-04-03T00:00:00Z", "2026-04-10T00:00:00Z", "2026-04-13T00:00:00Z"}},
		{"star-prefixed day of month means and", "0 0 */2 * MON", "UTC", "2026-03-01T00:00:00Z", // Mondays with odd dates
			[]string{"2026-03-09T00:00:00Z", "2026-03-23T00:00:00Z", "2026-04-13T00:00:00Z"}},
		{"leap day", "0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"month names", "0 12 1 jun,DEC *", "UTC", "2026-03-01T00:00:00Z",
			[]string{"2026-06-01T12:00:00Z", "2026-12-01T12:00:00Z", "2027-06-01T12:00:00Z"}},
		{"Pacific Standard Time in winter", "0 18 * * 1-5", "Pacific Standard Time", "2026-01-05T00:00:00Z",
			[]string{"2026-01-05T18:00:00-08:00", "2026-01-06T18:00:00-08:00"}},
		{"Pacific across spring forward", "0 18 * * *", "America/Los_Angeles", "2026-03-07T12:00:00-08:00",
			[]string{"2026-03-07T18:00:00-08:00", "2026-03-08T18:00:00-07:00"}},
		// 02:30 does not exist on 8 March 2026 in Los Angeles: it fires at
		// the end of the gap, 03:00 PDT, and at 02:30 again the next day.
		{"Los Angeles skipped time fires at the gap's end", "30 2 * * *", "America/Los_Angeles", "2026-03-07T12:00:00-08:00",
			[]string{"2026-03-08T03:00:00-07:00", "2026-03-09T02:30:00-07:00"}},
		{"Los Angeles skipped times fire once together", "*/30 * * * *", "America/Los_Angeles", "2026-03-08T01:45:00-08:00",
			[]string{"2026-03-08T03:00:00-07:00", "2026-03-08T03:30:00-07:00"}},
		// 01:30 happens twice on 1 November 2026: it fires at the first.
		{"Los Angeles repeated time fires once", "30 1 * * *", "America/Los_Angeles", "2026-10-31T12:00:00-07:00",
			[]string{"2026-11-01T01:30:00-07:00", "2026-11-02T01:30:00-08:00"}},
		{"Los Angeles repeated hour fires in its first pass only", "*/30 * * * *", "America/Los_Angeles", "2026-11-01T01:00:00-07:00",
			[]string{"2026-11-01T01:30:00-07:00", "2026-11-01T02:00:00-08:00"}},
		{"after inside the second pass", "*/30 * * * *", "America/Los_Angeles", "2026-11-01T01:15:00-08:00",
			[]string{"2026-11-01T02:00:00-08:00"}},
		{"Berlin skipped time", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{"Berlin repeated time", "30 2 * * *", "W. Europe Standard Time", "2026-10-24T12:00:00+02:00",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"Berlin across fall back", "0 7 * * *", "Europe/Berlin", "2026-10-24T12:00:00+02:00",
			[]string{"2026-10-25T07:00:00+01:00"}},
		{"India has no DST", "30 9 * * *", "India Standard Time", "2026-03-06T00:00:00Z",
			[]string{"2026-03-06T09:30:00+05:30"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCron(tt.expr, mustZone(t, tt.zone))
			if err != nil {
				t.Fatal(err)
			}
			var got []time.Time
			after := mustTime(t, tt.after)
			for range tt.want {
				after = c.Next(after)
				got = append(got, after)
			}
			var want []time.Time
			for _, w := range tt.want {
				want = append(want, mustTime(t, w))
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(time.Time.Equal)); diff != "" {
				t.Errorf("occurrences (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadZone(t *testing.T) {
	tests := []struct{ name, want string }{
		{"", "UTC"},
		{"UTC", "UTC"},
		{"Pacific Standard Time", "America/Los_Angeles"},
		{"pacific standard time", "America/Los_Angeles"},
		{"Eastern Standard Time", "America/New_York"},
		{"Central European Standard Time", "Europe/Warsaw"},
		{"W. Europe Standard Time", "Europe/Berlin"},
		{"GMT Standard Time", "Europe/London"},
		{"India Standard Time", "Asia/Calcutta"},
		{"China Standard Time", "Asia/Shanghai"},
		{"Tokyo Standard Time", "Asia/Tokyo"},
		{"AUS Eastern Standard Time", "Australia/Sydney"},
		{"America/Los_Angeles", "America/Los_Angeles"},
		{"Europe/Berlin", "Europe/Berlin"},
	}
	for _, tt := range tests {
		loc, err := LoadZone(tt.name)
		if err != nil {
			t.Errorf("LoadZone(%q): %v", tt.name, err)
			continue
		}
		if loc.String() != tt.want {
			t.Errorf("LoadZone(%q) = %s, want %s", tt.name, loc, tt.want)
		}
	}
	for name, iana := range windowsZones {
		if _, err := time.LoadLocation(iana); err != nil {
			t.Errorf("windowsZones[%q] = %q: %v", name, iana, err)
		}
	}
	for _, bad := range []string{"Local", "Mars Standard Time", "PST8PDT/Nowhere"} {
		_, err := LoadZone(bad)
		want := `unknown time zone "` + bad + `": write a Windows zone name as Azure does ("Pacific Standard Time", "W. Europe Standard Time", "UTC") or an IANA name ("America/Los_Angeles", "Europe/Berlin")`
		if err == nil || err.Error() != want {
			t.Errorf("LoadZone(%q) error = %v, want %s", bad, err, want)
		}
	}
}

// FuzzParseCron checks that ParseCron never panics and that an accepted
// expression's Next is strictly after its argument and a time the
// expression names (or the end of a DST gap that swallowed one). Because
// ParseCron refuses expressions that never fire and every accepted one
// fires at least every eight years, Next is never zero for the instants
// tried here (years 1970 to 2170), well inside its ten-year horizon's
// reach; zero is reserved for the end of time.Time's range.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 18 * * 1-5", "*/15 * * * *", "30 2 * * *", "0 0 29 2 *", "0 0 13 * 5", "5/20 1-10/3 1,15 JAN-jun sun", "0 0 */2 * MON", "0 0 31 2 *", "* * * * 7", "1,,2 * * * *", "0 0 30 2 1"} {
		f.Add(s, int64(1772841600))
	}
	zones := []*time.Location{time.UTC}
	for _, name := range []string{"America/Los_Angeles", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Apia"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			f.Fatal(err)
		}
		zones = append(zones, loc)
	}
	f.Fuzz(func(t *testing.T, expr string, sec int64) {
		loc := zones[len(expr)%len(zones)]
		c, err := ParseCron(expr, loc)
		if err != nil {
			return
		}
		const span = 200 * 365 * 24 * 3600
		after := time.Unix((sec%span+span)%span, 0)
		next := c.Next(after)
		if next.IsZero() {
			t.Fatalf("Next(%v) of %q in %s is zero", after, expr, loc)
		}
		if !next.After(after) {
			t.Fatalf("Next(%v) of %q in %s = %v, not after it", after, expr, loc, next)
		}
		w := next.In(loc)
		named := c.dayMatches(w) && c.hour&(1<<w.Hour()) != 0 && c.minute&(1<<w.Minute()) != 0 && w.Second() == 0
		if start, _ := w.ZoneBounds(); !named && !start.Equal(next) {
			t.Fatalf("Next(%v) of %q in %s = %v, which the expression does not name", after, expr, loc, w)
		}
	})
}
