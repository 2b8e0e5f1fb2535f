package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scheduleMinute is the minute of the schedule tests' servers: a minute
// recurrence fires every scheduleMinute of real time.
const scheduleMinute = 2 * time.Second

type scheduleOut struct {
	Name      string     `json:"name"`
	Enabled   bool       `json:"enabled"`
	Trigger   string     `json:"trigger"`
	NextFire  *time.Time `json:"next_fire"`
	LastFired *time.Time `json:"last_fired"`
	LastJob   string     `json:"last_job"`
	LastError string     `json:"last_error"`
}

type firedJob struct {
	Name         string `json:"name"`
	Status       string `json:"status"`
	CodeSnapshot string `json:"code_snapshot"`
}

// firedJobs lists the jobs schedule fired, oldest occurrence first, with
// the occurrence each was fired for, which its name says.
func firedJobs(t *testing.T, s *server, schedule string) ([]firedJob, []time.Time) {
	t.Helper()
	code, body := s.call("GET", "/v1/jobs", s.token, nil)
	if code != http.StatusOK {
		t.Fatalf("list jobs: %d %s", code, body)
	}
	var all []firedJob
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	var jobs []firedJob
	var occs []time.Time
	for _, j := range all {
		stamp, ok := strings.CutPrefix(j.Name, schedule+"-")
		if !ok {
			continue
		}
		occ, err := time.Parse("20060102T150405Z", stamp)
		if err != nil {
			t.Fatalf("job %s: its name names no occurrence: %v", j.Name, err)
		}
		jobs, occs = append(jobs, j), append(occs, occ)
	}
	slices.Reverse(jobs) // the list is newest first
	slices.Reverse(occs)
	return jobs, occs
}

// firedTags are the schedule tags of a fired job.
func firedTags(t *testing.T, s *server, name string) map[string]string {
	t.Helper()
	code, body := s.call("GET", "/v1/jobs/"+name, s.token, nil)
	if code != http.StatusOK {
		t.Fatalf("show job %s: %d %s", name, code, body)
	}
	var j struct {
		Spec struct {
			Tags map[string]string `json:"tags"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return j.Spec.Tags
}

// waitFired waits until schedule has fired at least n jobs.
func waitFired(t *testing.T, s *server, schedule string, n int) []time.Time {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		jobs, occs := firedJobs(t, s, schedule)
		if len(jobs) >= n {
			return occs
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %s fired %d jobs, want %d; server output:\n%s", schedule, len(jobs), n, s.output)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func showSchedule(t *testing.T, s *server, name string) scheduleOut {
	t.Helper()
	r := s.mustFerry("schedule", "show", name, "-o", "json")
	var sc scheduleOut
	if err := json.Unmarshal([]byte(r.stdout), &sc); err != nil {
		t.Fatalf("schedule show -o json: %v\n%s", err, r.stdout)
	}
	return sc
}

// TestScheduleFiresAcrossKill9 is a minute recurrence on a server whose
// minute lasts two seconds: it fires jobs with the code uploaded once;
// the server is killed with SIGKILL, stays down past two occurrences and
// is started again, and then fires the latest missed occurrence once (no
// backfill) and goes on; every occurrence fires at most once; disabled,
// it fires no more.
func TestScheduleFiresAcrossKill9(t *testing.T) {
	s := startServer(t, "--schedule-minute", scheduleMinute.String())
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"src/hello.py": "print('fired')\n",
		"job.yml":      "command: python3 hello.py\ncode: ./src\ncompute: azureml:local\n",
		"schedule.yml": `$schema: https://azuremlschemas.azureedge.net/latest/schedule.schema.json
name: every-minute
display_name: every minute
trigger:
  type: recurrence
  frequency: minute
  interval: 1
  time_zone: "Pacific Standard Time"
create_job: ./job.yml
`,
	})
	r := s.mustFerry("schedule", "create", "-f", filepath.Join(dir, "schedule.yml"))
	mustContain(t, "schedule create", r.stdout, "every-minute", "every 1 minute")
	mustContain(t, "schedule create's upload", r.stderr, "code: uploaded 1 file")

	waitFired(t, s, "every-minute", 2)
	killed := time.Now()
	s.kill9()
	// Down for more than two occurrences: at least two are missed.
	time.Sleep(2*scheduleMinute + scheduleMinute/2)
	restarted := time.Now()
	s.start()
	jobs, _ := firedJobs(t, s, "every-minute")
	occs := waitFired(t, s, "every-minute", len(jobs)+3)

	t.Logf("killed %s, started again %s; occurrences fired: %v", killed.UTC().Format(time.TimeOnly), restarted.UTC().Format(time.TimeOnly), occs)
	// The first server fired the occurrences before the kill; the second
	// fired first the latest one it missed, once, with the number it
	// skipped: those between the last before the kill and it.
	i := slices.IndexFunc(occs, func(o time.Time) bool { return !o.Before(killed) })
	if i < 1 {
		t.Fatalf("no occurrence fired before the kill or none after it: %v", occs)
	}
	last, catchUp := occs[i-1], occs[i]
	missed := int(catchUp.Sub(last)/scheduleMinute) - 1
	if missed < 1 {
		t.Errorf("the first occurrence fired after the restart, %s, follows %s: the occurrences missed while the server was down were fired", catchUp, last)
	}
	all, _ := firedJobs(t, s, "every-minute")
	if got := firedTags(t, s, all[i].Name)["ferry.schedule.missed"]; got != strconv.Itoa(missed) {
		t.Errorf("catch-up job %s says it stands for %q missed occurrences, want %d (between %s and %s)", all[i].Name, got, missed, last, catchUp)
	}
	for k, j := range all {
		if k != i && k > 0 && occs[k].Sub(occs[k-1]) == scheduleMinute {
			if got := firedTags(t, s, j.Name)["ferry.schedule.missed"]; got != "" {
				t.Errorf("job %s, fired on time, says it stands for %s missed occurrences", j.Name, got)
			}
		}
	}
	for i := 1; i < len(occs); i++ {
		if !occs[i].After(occs[i-1]) {
			t.Errorf("occurrence %s fired twice or out of order: %v", occs[i], occs)
		}
		if d := occs[i].Sub(occs[i-1]); d%scheduleMinute != 0 {
			t.Errorf("occurrences %s and %s are %s apart, not a whole number of the schedule's minutes", occs[i-1], occs[i], d)
		}
	}

	r = s.mustFerry("schedule", "disable", "every-minute")
	mustContain(t, "schedule disable", r.stdout, "disabled")
	jobs, _ = firedJobs(t, s, "every-minute")
	time.Sleep(3 * scheduleMinute)
	after, occsAfter := firedJobs(t, s, "every-minute")
	if len(after) != len(jobs) {
		t.Errorf("a disabled schedule fired %d more jobs", len(after)-len(jobs))
	}
	if sc := showSchedule(t, s, "every-minute"); sc.Enabled || sc.NextFire != nil || sc.LastError != "" || sc.LastJob != after[len(after)-1].Name {
		t.Errorf("schedule show after disable = %+v, want disabled, no next firing, no error, last job %s", sc, after[len(after)-1].Name)
	}
	r = s.mustFerry("schedule", "list")
	mustContain(t, "schedule list", r.stdout, "every-minute", "disabled")

	for i, j := range after {
		tags := firedTags(t, s, j.Name)
		if tags["ferry.schedule"] != "every-minute" || tags["ferry.schedule.occurrence"] != occsAfter[i].Format(time.RFC3339) {
			t.Errorf("job %s has tags %v, want its schedule and occurrence %s", j.Name, tags, occsAfter[i].Format(time.RFC3339))
		}
		if j.CodeSnapshot == "" || j.CodeSnapshot != after[0].CodeSnapshot {
			t.Errorf("job %s has code snapshot %q, want the schedule's one snapshot %q", j.Name, j.CodeSnapshot, after[0].CodeSnapshot)
		}
		if got := s.waitStatus(j.Name, "Completed", "Failed", "Canceled"); got.Status != "Completed" {
			t.Errorf("fired job %s ended %s: %s", j.Name, got.Status, got.Error)
		}
	}
	s.mustFerry("schedule", "delete", "every-minute")
	if r := s.ferry("schedule", "show", "every-minute"); r.code == 0 {
		t.Errorf("schedule show after delete succeeded: %s", r)
	}
}

// TestScheduleRefusals: a schedule file with a bad trigger is refused
// naming the field and its line, and one whose job names an environment
// the workspace lacks is refused before its code is uploaded.
func TestScheduleRefusals(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"src/hello.py": "print('hi')\n",
		"bad-cron.yml": "name: bad\ntrigger:\n  type: cron\n  expression: \"0 25 * * *\"\ncreate_job: ./job.yml\n",
		"bad-zone.yml": "name: bad\ntrigger:\n  type: cron\n  expression: \"0 * * * *\"\n  time_zone: Mars Standard Time\ncreate_job: ./job.yml\n",
		"inline.yml": `name: inline
trigger: {type: cron, expression: "0 3 * * *"}
create_job:
  command: python3 hello.py
  code: ./src
  environment: azureml:never-registered:1
`,
	})
	r := s.ferry("schedule", "create", "-f", filepath.Join(dir, "bad-cron.yml"))
	if r.code == 0 {
		t.Fatalf("a cron hour of 25 was accepted: %s", r)
	}
	mustContain(t, "bad cron", r.stderr, "trigger.expression", "line 4", "hour")
	r = s.ferry("schedule", "create", "-f", filepath.Join(dir, "bad-zone.yml"))
	if r.code == 0 {
		t.Fatalf("an unknown time zone was accepted: %s", r)
	}
	mustContain(t, "bad zone", r.stderr, "trigger.time_zone", "Mars Standard Time", "Pacific Standard Time")

	counter := newUploadCounter(t, s.url)
	r = runFerry(t, []string{"FERRY_URL=" + counter.url, "FERRY_TOKEN=" + s.token, "FERRY_HOME=" + s.home},
		"schedule", "create", "-f", filepath.Join(dir, "inline.yml"))
	if r.code == 0 {
		t.Fatalf("a schedule whose job names a missing environment was accepted: %s", r)
	}
	mustContain(t, "missing environment", r.stderr, "inline.yml:6: create_job.environment:", "never-registered", "ferry environment create")
	if n := counter.calls.Load(); n != 0 {
		t.Errorf("%d uploads were made before the missing environment was found", n)
	}
	if r := s.ferry("schedule", "list"); strings.Contains(r.stdout, "inline") {
		t.Errorf("the refused schedule was stored: %s", r.stdout)
	}
}

// TestJobReferencesCheckedBeforeUpload: a job naming an environment, a
// data asset and a compute the workspace lacks is refused, each named by
// its field with what to do, and nothing was uploaded.
func TestJobReferencesCheckedBeforeUpload(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, `command: python3 train.py --data ${{inputs.data}}
code: ./src
environment: azureml:not-registered@latest
compute: azureml:no-such-cluster
inputs:
  data:
    type: uri_folder
    path: azureml:no-such-data:1
  local:
    type: uri_folder
    path: ./data
`, map[string]string{"src/train.py": "print(1)\n", "data/a.csv": "1,2\n"})
	counter := newUploadCounter(t, s.url)
	r := runFerry(t, []string{"FERRY_URL=" + counter.url, "FERRY_TOKEN=" + s.token, "FERRY_HOME=" + s.home}, "job", "create", "-f", file)
	if r.code == 0 {
		t.Fatalf("a job naming missing references was submitted: %s", r)
	}
	mustContain(t, "job create", r.stderr,
		"job.yml:3: environment:", "not-registered",
		"job.yml:4: compute:", "no-such-cluster", "ferry compute create",
		"inputs.data.path", "no-such-data")
	if n := counter.calls.Load(); n != 0 {
		t.Errorf("%d uploads (%d bytes) were made before the missing references were found", n, counter.bytes.Load())
	}
	if strings.Contains(r.stderr, "uploaded") {
		t.Errorf("job create reports an upload: %s", r.stderr)
	}
}
