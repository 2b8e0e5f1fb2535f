package cli

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// screen is what a terminal shows after out: \r returns to the start of
// the line, ESC[K erases to its end, and later text overwrites earlier.
func screen(out string) []string {
	var lines []string
	var cur []rune
	col := 0
	for i := 0; i < len(out); {
		switch {
		case strings.HasPrefix(out[i:], "\x1b[K"):
			cur = cur[:col]
			i += 3
			continue
		case out[i] == '\r':
			col = 0
		case out[i] == '\n':
			lines = append(lines, string(cur))
			cur, col = nil, 0
		default:
			r := []rune(out[i : i+1])[0]
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
		}
		i++
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

func TestProgressLineShowsTimeLeftOnlyOnceItMeansSomething(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	var out bytes.Buffer
	p := newProgressLine(&out, "uploading code", 100<<20, func() time.Time { return now })
	last := func() string {
		l := screen(out.String())
		return l[len(l)-1]
	}

	// The first bytes go out at once: a rate from them says nothing.
	now = start.Add(10 * time.Millisecond)
	p.Add(64 << 10)
	if got := last(); strings.Contains(got, "left") {
		t.Errorf("an estimate after 10ms: %q", got)
	}
	// A second on, but under 1% done: still none.
	now = start.Add(1500 * time.Millisecond)
	p.Add(1)
	if got := last(); strings.Contains(got, "left") {
		t.Errorf("an estimate at 0.06%%: %q", got)
	}
	// 2 s, 10 MiB of 100: 5 MiB/s, 18 s left.
	now = start.Add(2 * time.Second)
	p.Add(10<<20 - 64<<10 - 1)
	if diff := cmp.Diff("uploading code:  10% [==                      ] 10.0 MiB of 100.0 MiB, 5.0 MiB/s, 18s left", last()); diff != "" {
		t.Errorf("line (-want +got):\n%s", diff)
	}
	// Redraws are rate-limited, but the last one is always drawn.
	now = now.Add(time.Millisecond)
	before := out.Len()
	p.Add(1)
	if out.Len() != before {
		t.Errorf("redrew 1ms after the last draw: %q", out.String()[before:])
	}
	now = now.Add(time.Second)
	p.Add(90<<20 - 1)
	if got := last(); !strings.HasPrefix(got, "uploading code: 100% [========================] 100.0 MiB of 100.0 MiB") || strings.Contains(got, "left") {
		t.Errorf("done: %q", got)
	}
	p.Clear()
	out.WriteString("code: uploaded 3 files (100.0 MiB)\n")
	if diff := cmp.Diff([]string{"code: uploaded 3 files (100.0 MiB)"}, screen(out.String())); diff != "" {
		t.Errorf("after Clear (-want +got):\n%s", diff)
	}
}

func TestProgressLineHidesAnAbsurdEstimate(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	var out bytes.Buffer
	p := newProgressLine(&out, "uploading code", 1<<40, func() time.Time { return now })
	// 2% of 1 TiB in 100 hours: about 5000 hours left.
	now = start.Add(100 * time.Hour)
	p.Add(20 << 30)
	if got := screen(out.String()); strings.Contains(strings.Join(got, "\n"), "left") {
		t.Errorf("an estimate of over a day: %q", got)
	}
}

// The upload's outcome is printed on a line of its own, not after the
// progress bar: `job create` against a real server, with stderr taken for
// a terminal.
func TestUploadOutcomeIsNotOnTheProgressLine(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cluster.yml": "name: ds1\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\n"})
	// The job waits for a node a quota of 0 cores never allows: the test
	// is about its upload, and leaves no runner behind.
	for _, args := range [][]string{{"quota", "set", "standardDSv2Family", "0"}, {"compute", "create", "-f", filepath.Join(dir, "cluster.yml")}} {
		if r := s.ferry(t, args...); r.code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
	}
	writeFiles(t, dir, map[string]string{
		"job.yml":    "command: ls\ncode: src\ncompute: ds1\n",
		"src/a.txt":  strings.Repeat("a", 300<<10),
		"src/b/c.py": "print('c')\n",
	})
	var out, errb bytes.Buffer
	a := newApp(&out, &errb, envOf(map[string]string{"FERRY_URL": s.url, "FERRY_TOKEN": s.token}))
	a.terminal = func(w io.Writer) bool { return w == &errb }
	if code := a.run(t.Context(), []string{"job", "create", "-f", filepath.Join(dir, "job.yml")}); code != 0 {
		t.Fatalf("job create: %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "uploading code: 100%") {
		t.Errorf("no progress was drawn: %q", errb.String())
	}
	if diff := cmp.Diff([]string{"code: uploaded 2 files (300.0 KiB)"}, screen(errb.String())); diff != "" {
		t.Errorf("what the terminal shows (-want +got):\n%s\nraw: %q", diff, errb.String())
	}
}
