package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// counter is a job that checkpoints a count into ./outputs every step and
// resumes from it, as training scripts do on low-priority clusters. Each
// step is logged to outputs/steps.txt as "ATTEMPT COUNT". It stops on
// SIGTERM between steps, as such scripts do: killed between its two writes
// it would leave a count that steps.txt does not hold (seen once on a
// loaded machine: step 8 followed step 6).
const counter = `import os, signal, sys, time
stop = False
def term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, term)
p = "outputs/count.txt"
n = int(open(p).read()) if os.path.exists(p) else 0
attempt = os.environ["FERRY_ATTEMPT"]
print("attempt %s starts at %d" % (attempt, n), flush=True)
while n < 25 and not stop:
    n += 1
    with open(p + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(p + ".tmp", p)
    with open("outputs/steps.txt", "a") as f:
        f.write("%s %d\n" % (attempt, n))
    print("step", n, flush=True)
    time.sleep(0.3)
if stop:
    sys.exit(143)
print("done at", n, flush=True)
`

// A node of a low-priority cluster is preempted mid-job: the job is
// stopped with its outputs kept, runs again as attempt 2 on a new node,
// goes on counting from its checkpoint (not from 0), and completes; the
// preemption is listed and is no failure.
func TestPreemptedJobResumesFromItsOutputs(t *testing.T) {
	preemptAndResume(t, startServer(t), "")
}

// The same on nodes that are containers: the docker provider has no mark
// of its own, and preempt-node works on the server's side alone.
func TestDockerNodePreemptedJobResumes(t *testing.T) {
	preemptAndResume(t, startNodeServer(t), "provider:\n  type: docker\n  image: "+testutil.NodeImage+"\n")
}

// preemptAndResume runs the counter on a low-priority cluster (of the
// server's default provider, or the one in providerYAML), preempts its
// node mid-run and checks that it resumes.
func preemptAndResume(t *testing.T, s *server, providerYAML string) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cluster.yml": `$schema: https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json
name: spot
type: amlcompute
size: Standard_DS1_v2
min_instances: 0
max_instances: 1
idle_time_before_scale_down: 2
tier: low_priority
` + providerYAML})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "cluster.yml"))
	quotas := s.mustFerry("quota", "list").stdout
	mustContain(t, "quota list", quotas, "lowPriority")

	s.mustFerry("job", "create", "-f", jobFile(t, "code: .\ncommand: python3 count.py\ncompute: azureml:spot\n", map[string]string{"count.py": counter}), "--name", "counter")
	s.waitStatus("counter", "Running")
	waitLog(t, s, "counter", "step 3")
	ns := s.nodes("spot")
	if len(ns) != 1 {
		t.Fatalf("nodes %+v", ns)
	}
	first := ns[0].Name
	r := s.mustFerry("compute", "preempt-node", "spot", first)
	mustContain(t, "preempt-node", r.stdout, "Preempted")

	j := s.waitStatus("counter", "Completed", "Failed", "Canceled")
	if j.Status != "Completed" {
		t.Fatalf("counter: %s (%s: %s)\nserver:\n%s", j.Status, j.StatusReason, j.Error, s.output)
	}
	var full struct {
		Attempt     int `json:"attempt"`
		Preemptions []struct {
			Attempt int    `json:"attempt"`
			Node    string `json:"node"`
		} `json:"preemptions"`
		History []struct {
			To string `json:"to"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("job", "show", "counter", "-o", "json").stdout), &full); err != nil {
		t.Fatal(err)
	}
	if full.Attempt != 2 || len(full.Preemptions) != 1 || full.Preemptions[0].Attempt != 1 || full.Preemptions[0].Node != first {
		t.Fatalf("job show: attempt %d, preemptions %+v; want attempt 2 after one preemption of attempt 1 on %s", full.Attempt, full.Preemptions, first)
	}
	for _, e := range full.History {
		if e.To == "Failed" {
			t.Errorf("the history holds a failure: %+v", full.History)
		}
	}
	mustContain(t, "job show", s.mustFerry("job", "show", "counter").stdout, "preemptions:", "attempt 1", first)

	dl := t.TempDir()
	s.mustFerry("job", "download", "counter", "--download-path", dl)
	raw, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "steps.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 1 counted 1..k; attempt 2 went on from k+1 to 25.
	var attempts []string
	last := 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[1])
		if n != last+1 {
			t.Fatalf("step %d follows step %d: the count restarted or skipped:\n%s", n, last, raw)
		}
		last = n
		if len(attempts) == 0 || attempts[len(attempts)-1] != f[0] {
			attempts = append(attempts, f[0])
		}
	}
	if last != 25 || strings.Join(attempts, ",") != "1,2" {
		t.Fatalf("steps by attempts %v up to %d; want attempt 1 then attempt 2, up to 25:\n%s", attempts, last, raw)
	}
	for _, n := range s.nodes("spot") {
		if n.Name == first {
			t.Errorf("the preempted node %s is still listed", first)
		}
	}
	// Idle for 2 s, the cluster goes back to zero: no machine is left behind.
	s.waitNodes("spot", 0)
}
