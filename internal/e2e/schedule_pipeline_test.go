package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSchedulePipelineFiresWithReuse: a schedule whose create_job is a
// pipeline job file fires pipeline jobs (the component's code uploaded
// once, at schedule create); each firing's steps are made as a submitted
// pipeline's are, and a firing after an earlier one completed reuses its
// steps (same components and inputs); the server is killed with SIGKILL
// and started again, and no occurrence fires twice.
func TestSchedulePipelineFiresWithReuse(t *testing.T) {
	s := startServer(t, "--schedule-minute", scheduleMinute.String())
	dir := t.TempDir()
	counter := jobWritableFile(t, "runs.txt")
	writeFiles(t, dir, map[string]string{
		"data/rows.txt":               "a\nb\nc\nd\n",
		"components/prep.yml":         prepComponent,
		"components/prep_src/prep.sh": "echo prep ran >> " + counter + "\nhead -n $3 $1/rows.txt > $2/clean.txt\n",
		"pipeline.yml": `type: pipeline
settings:
  default_compute: azureml:local
inputs:
  raw_data:
    type: uri_folder
    path: ./data
jobs:
  prep:
    component: ./components/prep.yml
    inputs:
      raw: ${{parent.inputs.raw_data}}
  count:
    command: echo count ran >> ` + counter + ` && wc -l < ${{inputs.clean}}/clean.txt
    inputs:
      clean: ${{parent.jobs.prep.outputs.clean}}
`,
		"schedule.yml": `name: nightly-pipe
trigger:
  type: recurrence
  frequency: minute
  interval: 1
create_job: ./pipeline.yml
`,
	})
	r := s.mustFerry("schedule", "create", "-f", filepath.Join(dir, "schedule.yml"))
	mustContain(t, "schedule create", r.stdout, "nightly-pipe", "pipeline")
	mustContain(t, "schedule create's upload", r.stderr, "uploaded")

	waitFired(t, s, "nightly-pipe", 2)
	s.kill9()
	time.Sleep(scheduleMinute)
	s.start()
	jobs, _ := firedJobs(t, s, "nightly-pipe")
	occs := waitFired(t, s, "nightly-pipe", len(jobs)+2)
	s.mustFerry("schedule", "disable", "nightly-pipe")
	for i := 1; i < len(occs); i++ {
		if !occs[i].After(occs[i-1]) {
			t.Errorf("occurrence %s fired twice or out of order: %v", occs[i], occs)
		}
	}

	all, _ := firedJobs(t, s, "nightly-pipe")
	reusedAfter := 0
	for i, j := range all {
		p := s.waitPipeline(j.Name)
		if p.Status != "Completed" {
			t.Fatalf("fired pipeline %s ended %s: %s %+v\nlog of count: %s", j.Name, p.Status, p.StatusReason, p.Steps, s.ferry("job", "stream", j.Name+"-count"))
		}
		if len(p.Steps) != 2 {
			t.Fatalf("fired pipeline %s has steps %+v, want prep and count", j.Name, p.Steps)
		}
		tags := pipelineTags(t, s, j.Name)
		if tags["ferry.schedule"] != "nightly-pipe" || tags["ferry.schedule.occurrence"] != occs[i].Format(time.RFC3339) {
			t.Errorf("pipeline %s has tags %v, want its schedule and occurrence %s", j.Name, tags, occs[i].Format(time.RFC3339))
		}
		_, _, prepReused, _, _ := p.step(t, "prep")
		_, _, countReused, _, _ := p.step(t, "count")
		if i == 0 {
			if prepReused != "" || countReused != "" {
				t.Errorf("the first firing %s reused steps (%q, %q)", j.Name, prepReused, countReused)
			}
			continue
		}
		if prepReused != "" && countReused != "" {
			reusedAfter++
		}
	}
	// The last firing came after the earlier ones completed: its steps
	// reused theirs, and ran nothing.
	last := s.showPipeline(all[len(all)-1].Name)
	for _, step := range []string{"prep", "count"} {
		if _, _, reused, _, _ := last.step(t, step); !strings.HasPrefix(reused, "nightly-pipe-") {
			t.Errorf("the last firing %s: step %s reused %q, want an earlier firing's step", last.Name, step, reused)
		}
	}
	data, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	ran := strings.Count(string(data), "prep ran")
	if ran >= len(all) {
		t.Errorf("prep ran %d times for %d firings; a firing with unchanged inputs should reuse it", ran, len(all))
	}
	t.Logf("%d firings, prep ran %d times, %d firings reused both steps", len(all), ran, reusedAfter)
	sc := showSchedule(t, s, "nightly-pipe")
	if sc.LastJob != all[len(all)-1].Name || sc.LastError != "" {
		t.Errorf("schedule show = %+v, want last job %s and no error", sc, all[len(all)-1].Name)
	}
}

// pipelineTags are the tags of a pipeline job.
func pipelineTags(t *testing.T, s *server, name string) map[string]string {
	t.Helper()
	code, body := s.call("GET", "/v1/jobs/"+name, s.token, nil)
	if code != http.StatusOK {
		t.Fatalf("show job %s: %d %s", name, code, body)
	}
	var j struct {
		Pipeline struct {
			Tags map[string]string `json:"tags"`
		} `json:"pipeline"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return j.Pipeline.Tags
}
