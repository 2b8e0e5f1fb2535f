package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// The attack of issue 29, item 1: a job swaps a folder of another job's
// outputs with a symlink to the data dir (renameat2 RENAME_EXCHANGE, in a
// loop) while the other job's runner, root, uploads them. Items 3 and 1's
// accounts: jobs of two servers on one host, and of two attempts, run as
// different uids, so neither can read the other's environment, write into
// its folders or signal it.

// racerScript swaps outputs/sub of every victim job it is told of with a
// symlink to TARGET, from when the victim has written its files until the
// test says stop, and also tries to read each victim's environment and
// to write a file into its outputs. It prints what it managed.
const racerScript = `import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
runs, target, shared, victims = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
print("racer uid=%d" % os.getuid(), flush=True)
swaps, errors, wrote, environ = 0, set(), 0, 0
open(os.path.join(shared, "racer-ready"), "w").close()
while not os.path.exists(os.path.join(shared, "stop")):
    for v in victims:
        if not os.path.exists(os.path.join(shared, "written-" + v)):
            continue
        out = os.path.join(runs, v, "1", "wd", "outputs")
        sub, link = os.path.join(out, "sub"), os.path.join(out, ".swap")
        try:
            if not os.path.lexists(link):
                os.symlink(target, link)
            with open(os.path.join(out, "planted"), "w") as f:
                f.write("planted")
            wrote += 1
        except OSError as e:
            errors.add("%s:%s" % (v, os.strerror(e.errno)))
        for _ in range(500):
            if libc.renameat2(-100, sub.encode(), -100, link.encode(), 2) == 0:
                swaps += 1
            else:
                errors.add("%s:renameat2 %s" % (v, os.strerror(ctypes.get_errno())))
                break
        pid = open(os.path.join(shared, "pid-" + v)).read().strip() if os.path.exists(os.path.join(shared, "pid-" + v)) else ""
        if pid:
            try:
                open("/proc/%s/environ" % pid, "rb").read()
                environ += 1
            except OSError as e:
                errors.add("%s:environ %s" % (v, os.strerror(e.errno)))
    time.sleep(0.001)
print("swaps=%d wrote=%d environ=%d errors=%s" % (swaps, wrote, environ, sorted(errors)), flush=True)
`

// victimScript writes 60 files under outputs/sub, says so, and stays a
// moment with a secret in its environment, so that the racer swaps its
// folders while it runs and while its outputs are uploaded.
const victimScript = `mkdir -p outputs/sub/deeper
for i in $(seq 1 30); do echo "output $i" > outputs/sub/f$i; echo "output $i" > outputs/sub/deeper/f$i; done
echo "victim uid=$(id -u)"
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
echo $$ > "$SHARED/pid-$FERRY_JOB_ID"
touch "$SHARED/written-$FERRY_JOB_ID"
sleep 2
`

type raceResult struct {
	racerLog   string
	victimLogs map[string]string
}

// runOutputRace runs a racer job on racerSrv against victims on
// victimSrv, and checks that no victim's outputs hold anything of
// victimSrv's data dir. It returns the logs.
func runOutputRace(t *testing.T, victimSrv, racerSrv *server, victims int) raceResult {
	t.Helper()
	shared := jobWritableDir(t)
	var names []string
	for i := range victims {
		names = append(names, fmt.Sprintf("victim-%d", i+1))
	}
	racer := jobFile(t, "code: src\ncommand: python3 racer.py "+filepath.Join(victimSrv.work, "runs")+" "+victimSrv.dir+" "+shared+" "+strings.Join(names, ",")+"\n",
		map[string]string{"src/racer.py": racerScript})
	racerSrv.mustFerry("job", "create", "-f", racer, "--name", "racer")
	deadline := racerSrv.waitStatus("racer", "Running", "Failed")
	if deadline.Status != "Running" {
		t.Fatalf("racer: %s (%s)", deadline.Status, deadline.StatusReason)
	}
	waitFile(t, filepath.Join(shared, "racer-ready"))
	victim := jobFile(t, "code: src\ncommand: sh victim.sh\nenvironment_variables:\n  SHARED: "+shared+"\n  VICTIM_SECRET: the-victims-secret\n",
		map[string]string{"src/victim.sh": victimScript})
	res := raceResult{victimLogs: map[string]string{}}
	for _, name := range names {
		victimSrv.mustFerry("job", "create", "-f", victim, "--name", name)
		if j := victimSrv.waitStatus(name, "Completed", "Failed"); j.Status != "Completed" {
			t.Fatalf("%s: %s (%s)", name, j.Status, j.StatusReason)
		}
		res.victimLogs[name] = victimSrv.mustFerry("job", "stream", name).stdout
		dl := t.TempDir()
		victimSrv.mustFerry("job", "download", name, "--download-path", dl)
		checkNoDataDir(t, victimSrv, name, filepath.Join(dl, "artifacts", "outputs"))
	}
	if err := os.WriteFile(filepath.Join(shared, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j := racerSrv.waitStatus("racer", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("racer: %s (%s)", j.Status, j.StatusReason)
	}
	res.racerLog = racerSrv.mustFerry("job", "stream", "racer").stdout
	t.Logf("racer: %s", strings.TrimSpace(res.racerLog))
	return res
}

// checkNoDataDir fails when a downloaded output folder holds a file of
// the server's data dir, by name or by content.
func checkNoDataDir(t *testing.T, s *server, name, dir string) {
	t.Helper()
	dataNames := map[string]bool{}
	if es, err := os.ReadDir(s.dir); err == nil {
		for _, e := range es {
			dataNames[e.Name()] = true
		}
	}
	n := 0
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if dataNames[fi.Name()] || strings.Contains(string(b), s.token) {
			t.Errorf("%s's outputs hold %s, of the data dir", name, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("%s's outputs hold no file at all", name)
	}
}

var racerCounts = regexp.MustCompile(`swaps=(\d+) wrote=(\d+) environ=(\d+)`)

func counts(t *testing.T, log string) (swaps, wrote, environ int) {
	t.Helper()
	m := racerCounts.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the racer printed no counts:\n%s", log)
	}
	swaps, _ = strconv.Atoi(m[1])
	wrote, _ = strconv.Atoi(m[2])
	environ, _ = strconv.Atoi(m[3])
	return
}

// With every job of the server sharing one account (--job-uids none, as
// all jobs did before), the racer reaches the victims' outputs and swaps
// their folders through the whole upload: the uploader, which walks
// beneath the attempt's folder without following a link and reads as the
// victim's account, stores nothing of the data dir.
func TestOutputUploadRaceWithASharedAccount(t *testing.T) {
	testutil.RequireRoot(t)
	s := startServer(t, "--job-uids", "none")
	res := runOutputRace(t, s, s, 3)
	if swaps, _, _ := counts(t, res.racerLog); swaps == 0 {
		t.Fatalf("the racer swapped nothing: the race was not run\n%s", res.racerLog)
	}
}

// With the default, every attempt runs as a uid of its own: the racer
// cannot write into another job's outputs, swap its folders or read its
// environment, and the two ran as different uids; the same between two
// servers on one host (item 3), which take uids from one host-wide pool.
func TestAttemptsRunAsUIDsOfTheirOwn(t *testing.T) {
	testutil.RequireRoot(t)
	for _, two := range []bool{false, true} {
		t.Run(map[bool]string{false: "one server", true: "two servers"}[two], func(t *testing.T) {
			victimSrv := startServer(t)
			racerSrv := victimSrv
			if two {
				racerSrv = startServer(t)
			}
			res := runOutputRace(t, victimSrv, racerSrv, 2)
			swaps, wrote, environ := counts(t, res.racerLog)
			if swaps+wrote+environ != 0 {
				t.Errorf("the racer reached another attempt (swaps=%d wrote=%d environ=%d):\n%s", swaps, wrote, environ, res.racerLog)
			}
			mustContain(t, "racer", res.racerLog, "Permission denied")
			racerUID := regexp.MustCompile(`racer uid=(\d+)`).FindStringSubmatch(res.racerLog)
			if racerUID == nil {
				t.Fatalf("racer log: %s", res.racerLog)
			}
			for name, log := range res.victimLogs {
				jobUID(t, name, log)
				m := regexp.MustCompile(`victim uid=(\d+)`).FindStringSubmatch(log)
				if m == nil {
					t.Fatalf("%s log: %s", name, log)
				}
				// Victims run one after another and may take the same
				// uid in turn; each runs beside the racer, which holds
				// its own throughout.
				if m[1] == racerUID[1] {
					t.Errorf("%s ran as uid %s, as the racer beside it did", name, m[1])
				}
			}
		})
	}
}
