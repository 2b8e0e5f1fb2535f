package computetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// testCase is one behaviour every target must have.
type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

// cases run in this order; the server kills take the server down and so
// come last.
var cases = []testCase{
	{"logs", logsCompleteInOrder},
	{"exit-code", exitCode},
	{"outputs", outputs},
	{"inputs", inputs},
	{"variables", variables},
	{"metrics", metrics},
	{"mlflow", mlflowLogging},
	{"cancel-queued", cancelQueued},
	{"cancel-running", cancelRunning},
	{"timeout", timeout},
	{"server-kill9", serverKill9},
	{"server-kill9-job-ends-while-down", serverKill9JobEndsWhileDown},
}

// numbered is a shell loop that prints n numbered lines "prefix i", every
// fourth one to stderr, and the log it must give: stdout and stderr go to
// one log in the order they were written.
func numbered(prefix string, n int) (script, log string) {
	script = fmt.Sprintf(`for i in $(seq 1 %d); do if [ $((i %% 4)) -eq 0 ]; then echo "%s $i on stderr" >&2; else echo "%s $i"; fi; done`,
		n, prefix, prefix)
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i%4 == 0 {
			fmt.Fprintf(&b, "%s %d on stderr\n", prefix, i)
		} else {
			fmt.Fprintf(&b, "%s %d\n", prefix, i)
		}
	}
	return script, b.String()
}

// sameLog fails the case unless got is want, saying how they differ in
// terms of lines: how many, the first that differs, and lines seen twice.
func sameLog(t *testing.T, what, want, got string) {
	t.Helper()
	if got == want {
		return
	}
	w, g := strings.SplitAfter(want, "\n"), strings.SplitAfter(got, "\n")
	first := 0
	for first < len(w) && first < len(g) && w[first] == g[first] {
		first++
	}
	at := func(ls []string, i int) string {
		if i < len(ls) {
			return strconv.Quote(ls[i])
		}
		return "(end)"
	}
	seen := map[string]bool{}
	var twice []string
	for _, l := range g {
		if seen[l] && l != "" && len(twice) < 5 {
			twice = append(twice, strconv.Quote(l))
		}
		seen[l] = true
	}
	t.Fatalf("%s: %d lines, want %d; line %d is %s, want %s; lines seen twice: %v\ngot (first 2,000 bytes):\n%.2000s",
		what, len(g)-1, len(w)-1, first+1, at(g, first), at(w, first), twice, got)
}

// Every line a job prints reaches its log, in order, stdout and stderr
// interleaved as written, nothing lost and nothing twice: a line of
// 100,000 bytes whole, and a last line that ends without a newline.
func logsCompleteInOrder(t *testing.T, s *suite) {
	script, want := numbered("line", 2000)
	script += "\n  printf 'x%.0s' $(seq 1 100000); echo\n  printf 'the end, without a newline'"
	want += strings.Repeat("x", 100000) + "\nthe end, without a newline"
	name, streamed := s.create(t, "command: |\n  "+script+"\n", nil, "--stream")
	s.waitStatus(t, name, "Completed")
	sameLog(t, "job create --stream, following the job from its submission", want, streamed.Stdout)
	sameLog(t, "the log from the API", want, s.log(t, name))
	sameLog(t, "job stream of the ended job", want, s.mustFerry(t, "job", "stream", name).Stdout)
}

// A job that exits 3 is Failed with exit code 3, and one killed by
// SIGKILL with 137; what they printed before is kept.
func exitCode(t *testing.T, s *suite) {
	name := s.submit(t, "command: echo before; exit 3\n", nil)
	j := s.waitStatus(t, name, "Failed")
	if j.ExitCode == nil || *j.ExitCode != 3 {
		t.Errorf("exit code %v, want 3 (%+v)", j.ExitCode, j)
	}
	sameLog(t, "log", "before\n", s.log(t, name))
	if r := s.srv.Ferry(t, "job", "stream", name); r.Code != 3 {
		t.Errorf("job stream of a job that exited 3 exits %d", r.Code)
	}

	// A command killed by a signal (the OOM killer's SIGKILL) exits
	// 128+N, as a shell reports it.
	killed := s.submit(t, "command: echo before; kill -9 $$\n", nil)
	j = s.waitStatus(t, killed, "Failed")
	if j.ExitCode == nil || *j.ExitCode != 137 {
		t.Errorf("a command killed by SIGKILL: exit code %v, want 137 (%s; %s)", j.ExitCode, j.StatusReason, j.Error)
	}
	sameLog(t, "log of the killed command", "before\n", s.log(t, killed))
}

// What a job leaves in ./outputs and in its named outputs (a folder, a
// folder uploaded at the end, a single file) can be downloaded after it.
func outputs(t *testing.T, s *suite) {
	name := s.submit(t, `command: |
  echo model > outputs/model.txt
  mkdir -p outputs/sub && echo deep > outputs/sub/deep.txt
  seq 1 100000 > outputs/sub/seq.txt
  : > outputs/empty.txt
  echo '{"n": 14}' > ${{outputs.result}}/result.json
  echo up > ${{outputs.uploaded}}/u.txt
  echo 42 > ${{outputs.single}}
outputs:
  result: {type: uri_folder}
  uploaded: {type: uri_folder, mode: upload}
  single: {type: uri_file, path: azureml://datastores/workspaceblobstore/paths/answer.txt}
`, nil)
	s.waitStatus(t, name, "Completed")
	dl := s.download(t, name)
	var seq strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	for p, want := range map[string]string{
		"artifacts/outputs/sub/seq.txt":    seq.String(),
		"artifacts/outputs/empty.txt":      "",
		"artifacts/outputs/model.txt":      "model\n",
		"artifacts/outputs/sub/deep.txt":   "deep\n",
		"named-outputs/result/result.json": "{\"n\": 14}\n",
		"named-outputs/uploaded/u.txt":     "up\n",
		"named-outputs/single/answer.txt":  "42\n",
	} {
		got, err := os.ReadFile(filepath.Join(dl, p))
		if err != nil || string(got) != want {
			t.Errorf("downloaded %s = %.200q (%d bytes), %v; want %.200q (%d bytes)", p, got, len(got), err, want, len(want))
		}
	}
}

// A uri_folder input, mounted and downloaded, holds every file of the
// folder with its content; a uri_file input and a literal reach the
// command too.
func inputs(t *testing.T, s *suite) {
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i % 251)
	}
	sum := sha256.Sum256(big)
	name := s.submit(t, `command: |
  for d in ${{inputs.mounted}} ${{inputs.downloaded}}; do
    (cd "$d" && find . -type f | LC_ALL=C sort && cat a.txt sub/b.txt "with space.txt" ünï.txt && sha256sum big.bin)
  done
  cat ${{inputs.one}}
  echo "n=${{inputs.n}}"
inputs:
  mounted: {type: uri_folder, path: data}
  downloaded: {type: uri_folder, path: data, mode: download}
  one: {type: uri_file, path: data/sub/b.txt}
  n: 7
`, map[string]string{
		"data/a.txt":          "A\n",
		"data/sub/b.txt":      "B\n",
		"data/with space.txt": "S\n",
		"data/ünï.txt":        "U\n",
		"data/sub/deep/empty": "",
		"data/big.bin":        string(big),
	})
	s.waitStatus(t, name, "Completed")
	folder := "./a.txt\n./big.bin\n./sub/b.txt\n./sub/deep/empty\n./with space.txt\n./ünï.txt\nA\nB\nS\nU\n" + hex.EncodeToString(sum[:]) + "  big.bin\n"
	sameLog(t, "log", folder+folder+"B\nn=7\n", s.log(t, name))
}

// environment_variables reach the command as written, with no shell
// expansion, beside the variables every job gets.
func variables(t *testing.T, s *suite) {
	name := s.submit(t, `command: |
  echo "MY_VAR=[$MY_VAR]"
  echo "ODD=[$ODD]"
  echo "LINES=[$LINES]"
  echo "FERRY_JOB_ID=$FERRY_JOB_ID"
  echo "FERRY_ATTEMPT=$FERRY_ATTEMPT"
  [ -n "$FERRY_RUN_TOKEN" ] && echo "run token set"
  [ -d "$FERRY_OUTPUTS_DIR" ] && echo "outputs dir exists"
  case "$FERRY_API_URL" in http://*|https://*) echo "api url set";; esac
environment_variables:
  MY_VAR: my value
  ODD: 'it''s "quoted", $HOME stays, a=b'
  LINES: "one\ntwo"
`, nil)
	s.waitStatus(t, name, "Completed")
	want := fmt.Sprintf("MY_VAR=[my value]\nODD=[it's \"quoted\", $HOME stays, a=b]\nLINES=[one\ntwo]\nFERRY_JOB_ID=%s\nFERRY_ATTEMPT=1\n"+
		"run token set\noutputs dir exists\napi url set\n", name)
	sameLog(t, "log", want, s.log(t, name))
}

// Metrics a job logs through FERRY_API_URL with its run token are kept,
// every point in order.
func metrics(t *testing.T, s *suite) {
	name := s.submit(t, `code: .
command: python3 log.py
`, map[string]string{"log.py": `import json, os, urllib.request
for step in range(5):
    req = urllib.request.Request(
        os.environ["FERRY_API_URL"] + "/v1/jobs/" + os.environ["FERRY_JOB_ID"] + "/metrics",
        data=json.dumps({"name": "loss", "value": 1.0 / (step + 1), "step": step}).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"], "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
print("logged")
`})
	s.waitStatus(t, name, "Completed")
	code, body := s.srv.Get(t, "/v1/jobs/"+name+"/metrics?name=loss")
	var series []struct {
		Value float64 `json:"value"`
		Step  int64   `json:"step"`
	}
	if code != 200 || json.Unmarshal(body, &series) != nil {
		t.Fatalf("GET the metrics of %s: %d %s", name, code, body)
	}
	if len(series) != 5 {
		t.Fatalf("%d points of loss, want 5: %s", len(series), body)
	}
	for i, m := range series {
		if m.Step != int64(i) || m.Value != 1.0/float64(i+1) {
			t.Errorf("point %d = %+v, want step %d value %v", i, m, i, 1.0/float64(i+1))
		}
	}
}

// A script that logs with mlflow, as Azure's examples do, runs unchanged:
// with no mlflow installed, Ferry's stand-in sends its metrics, params and
// tags to the runner, and they are kept with the job.
func mlflowLogging(t *testing.T, s *suite) {
	name := s.submit(t, `code: .
command: python3 train.py
`, map[string]string{"train.py": `import mlflow
with mlflow.start_run():
    mlflow.log_param("lr", 0.5)
    mlflow.set_tag("target", "any")
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
print("logged")
`})
	s.waitStatus(t, name, "Completed")
	code, body := s.srv.Get(t, "/v1/jobs/"+name+"/metrics?name=loss")
	var series []struct {
		Step int64 `json:"step"`
	}
	if code != 200 || json.Unmarshal(body, &series) != nil || len(series) != 3 || series[2].Step != 2 {
		t.Errorf("the loss series of %s: %d %s, want 3 points, steps 0..2", name, code, body)
	}
	code, body = s.srv.Get(t, "/v1/jobs/"+name+"/run-values")
	var v struct {
		Params map[string]string `json:"params"`
		Tags   map[string]string `json:"tags"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil || v.Params["lr"] != "0.5" || v.Tags["target"] != "any" {
		t.Errorf("the params and tags of %s: %d %s", name, code, body)
	}
}

// A job canceled while it waits for the target never starts: not while
// the target is busy, and not once it is free again.
func cancelQueued(t *testing.T, s *suite) {
	blocker := s.submit(t, "command: echo blocking; sleep 300\n", nil)
	s.waitStatus(t, blocker, "Running")
	marker := filepath.Join(s.shared, randomHex(4)+".ran")
	waiting := s.submit(t, "command: touch "+marker+"; echo ran\n", nil)
	if j := s.show(t, waiting); j.Status != "Queued" {
		t.Fatalf("a second job on a target that runs one at a time is %s, want Queued (the harness must give a target of one slot)", j.Status)
	}
	s.mustFerry(t, "job", "cancel", waiting)
	s.waitStatus(t, waiting, "Canceled")

	// Free the target and prove it takes work again: the canceled job had
	// every chance to start by the time the probe has run.
	s.mustFerry(t, "job", "cancel", blocker)
	s.waitStatus(t, blocker, "Canceled")
	probe := s.submit(t, "command: echo probe\n", nil)
	s.waitStatus(t, probe, "Completed")

	j := s.show(t, waiting)
	if j.Status != "Canceled" || j.Started != nil || j.reached("Preparing")+j.reached("Running") != 0 {
		t.Errorf("the job canceled while queued: %s, started %v, history %+v; want Canceled and never started", j.Status, j.Started, j.History)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the job canceled while queued ran its command")
	}
	if log := s.log(t, waiting); strings.Contains(log, "ran") {
		t.Errorf("the job canceled while queued has a log: %q", log)
	}
}

// A job canceled while it runs is Canceled and leaves no process: not a
// child that ignores SIGTERM, not one that left the job's session. Each
// records its own pid, and the target's own list of the job's processes
// must see them while they live.
func cancelRunning(t *testing.T, s *suite) {
	pids := filepath.Join(s.shared, randomHex(4)+".pids")
	name := s.submit(t, fmt.Sprintf(`command: |
  (trap '' TERM; exec sleep 300) &
  echo $! >> %[1]s
  setsid sleep 301 &
  echo $! >> %[1]s
  echo $$ >> %[1]s
  echo ready
  wait
`, pids), nil)
	s.waitLog(t, name, "ready")
	recorded := map[int]string{} // pid -> its command line, so a reused pid is not mistaken for it
	live := func() map[int]string {
		m := map[int]string{}
		for _, p := range testutil.Procs() {
			m[p.PID] = p.CmdLine()
		}
		return m
	}()
	for _, f := range strings.Fields(s.waitFile(t, filepath.Base(pids), 3)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("the job recorded pid %q", f)
		}
		cmd, ok := live[pid]
		if !ok {
			t.Fatalf("the job's process %d is not alive before the cancel", pid)
		}
		recorded[pid] = cmd
	}
	listed := map[int]bool{}
	for _, p := range s.h.JobProcs(name) {
		if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
			listed[pid] = true
		}
	}
	for pid, cmd := range recorded {
		if !listed[pid] {
			t.Fatalf("the harness's JobProcs does not list the job's process %d %q, so it cannot prove none is left: %v", pid, cmd, s.h.JobProcs(name))
		}
	}

	s.mustFerry(t, "job", "cancel", name)
	j := s.waitStatus(t, name, "Canceled")
	if j.CancelRequestedBy == "" {
		t.Errorf("cancel_requested_by is not set: %+v", j)
	}
	sameLog(t, "the canceled job's log", "ready\n", s.log(t, name))
	s.waitNoProcs(t, name)
	for _, p := range testutil.Procs() {
		if cmd, ok := recorded[p.PID]; ok && cmd == p.CmdLine() {
			t.Errorf("the job's process %d %q outlived the cancel", p.PID, cmd)
		}
	}
}

// A job that runs past limits.timeout fails as timed out, naming the
// field, and leaves no process, not even one that ignores SIGTERM.
func timeout(t *testing.T, s *suite) {
	name := s.submit(t, "command: (trap '' TERM; exec sleep 120) & sleep 121\nlimits:\n  timeout: 2\n", nil)
	j := s.waitStatus(t, name, "Failed")
	if j.StatusReason != "timeout" || !strings.Contains(j.Error, "limits.timeout") {
		t.Errorf("a timed-out job: reason %q, error %q; want reason timeout and an error naming limits.timeout", j.StatusReason, j.Error)
	}
	s.waitNoProcs(t, name)
}

// The server is killed with SIGKILL mid-job, a second job queued behind
// it. The job goes on printing while the server is down and after it is
// back; it completes with every line once, in order, and its outputs, and
// its command ran once; then the queued job runs, once.
func serverKill9(t *testing.T, s *suite) {
	id := filepath.Join(s.shared, randomHex(4))
	before, wantBefore := numbered("before", 200)
	during, wantDuring := numbered("during", 200)
	after, wantAfter := numbered("after", 200)
	name := s.submit(t, fmt.Sprintf(`command: |
  echo "attempt $FERRY_ATTEMPT" >> %[1]s.runs
  %[2]s
  while [ ! -e %[1]s.gate1 ]; do sleep 0.05; done
  %[3]s
  touch %[1]s.during
  while [ ! -e %[1]s.gate2 ]; do sleep 0.05; done
  %[4]s
  echo done > outputs/result.txt
`, id, before, during, after), nil)
	s.waitStatus(t, name, "Running")
	s.waitLog(t, name, "before 199\nbefore 200 on stderr\n")
	// A second job waits behind it (the target runs one at a time) across
	// the crash: it must run once the first ends, and once only.
	queued := s.submit(t, fmt.Sprintf("command: echo \"attempt $FERRY_ATTEMPT\" >> %s.queued-runs; echo queued ran\n", id), nil)
	if j := s.show(t, queued); j.Status != "Queued" {
		t.Fatalf("a second job behind a running one is %s, want Queued", j.Status)
	}

	s.srv.Kill9(t)
	if err := os.WriteFile(id+".gate1", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitFile(t, filepath.Base(id)+".during", 0) // printed while the server was down
	s.srv.Restart(t)
	if err := os.WriteFile(id+".gate2", nil, 0o644); err != nil {
		t.Fatal(err)
	}

	j := s.waitStatus(t, name, "Completed")
	sameLog(t, "the log after the restart", wantBefore+wantDuring+wantAfter, s.log(t, name))
	if runs, err := os.ReadFile(id + ".runs"); err != nil || string(runs) != "attempt 1\n" {
		t.Errorf("the command's runs: %q, %v; want it run once, as attempt 1", runs, err)
	}
	if n, m := j.reached("Running"), j.reached("Completed"); n != 1 || m != 1 {
		t.Errorf("history %+v: Running %d times and Completed %d times, want once each", j.History, n, m)
	}
	dl := s.download(t, name)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "result.txt")); err != nil || string(got) != "done\n" {
		t.Errorf("output after the restart = %q, %v; want \"done\\n\"", got, err)
	}
	s.waitNoProcs(t, name)

	q := s.waitStatus(t, queued, "Completed")
	sameLog(t, "the log of the job queued across the restart", "queued ran\n", s.log(t, queued))
	if runs, err := os.ReadFile(id + ".queued-runs"); err != nil || string(runs) != "attempt 1\n" {
		t.Errorf("the queued job's runs: %q, %v; want it run once, as attempt 1", runs, err)
	}
	if n := q.reached("Running"); n != 1 {
		t.Errorf("the queued job's history %+v: Running %d times, want once", q.History, n)
	}
}

// The server is killed with SIGKILL mid-job and the job ends, with an
// exit code of its own, while the server is down. Once the server is
// back the job ends as it did, with its whole log and its outputs, and
// it ran once.
func serverKill9JobEndsWhileDown(t *testing.T, s *suite) {
	id := filepath.Join(s.shared, randomHex(4))
	before, wantBefore := numbered("before", 100)
	during, wantDuring := numbered("during", 100)
	name := s.submit(t, fmt.Sprintf(`command: |
  echo "attempt $FERRY_ATTEMPT" >> %[1]s.runs
  %[2]s
  while [ ! -e %[1]s.gate ]; do sleep 0.05; done
  %[3]s
  echo partial > outputs/result.txt
  touch %[1]s.ending
  exit 5
`, id, before, during), nil)
	s.waitLog(t, name, "before 99\nbefore 100 on stderr\n")

	s.srv.Kill9(t)
	if err := os.WriteFile(id+".gate", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitFile(t, filepath.Base(id)+".ending", 0)
	// The command has exited once this host has none of its processes
	// (the job's own record, FERRY_JOB_ID; its runner, waiting for the
	// server, has none). A target whose jobs run elsewhere shows none here,
	// and the command then ends about now, still before the restart most
	// of the time.
	for deadline := time.Now().Add(patience); len(HostJobProcs(name)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command of job %s did not exit: %v", name, HostJobProcs(name))
		}
	}
	s.srv.Restart(t)

	j := s.waitStatus(t, name, "Failed")
	if j.ExitCode == nil || *j.ExitCode != 5 {
		t.Errorf("exit code %v, want the job's own 5 (%s; %s)", j.ExitCode, j.StatusReason, j.Error)
	}
	sameLog(t, "the log after the restart", wantBefore+wantDuring, s.log(t, name))
	if runs, err := os.ReadFile(id + ".runs"); err != nil || string(runs) != "attempt 1\n" {
		t.Errorf("the command's runs: %q, %v; want it run once, as attempt 1", runs, err)
	}
	if n := j.reached("Failed") + j.reached("Completed") + j.reached("Canceled"); n != 1 {
		t.Errorf("history %+v: %d ends, want one", j.History, n)
	}
	dl := s.download(t, name)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "result.txt")); err != nil || string(got) != "partial\n" {
		t.Errorf("output after the restart = %q, %v; want \"partial\\n\"", got, err)
	}
	s.waitNoProcs(t, name)
}
