package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// probeScript tries to read the workspace's secrets in every way a job
// could, and reports who it is and that it can still write its outputs.
const probeScript = `try() { if cat "$2" >/dev/null 2>&1; then echo "READ $1"; else echo "denied $1"; fi; }
try abs-token "$DATA/owner.token"
try rel-token "$REL"
try dotdot-token ../../../../owner.token
try db "$DATA/ferry.db"
try wal "$DATA/ferry.db-wal"
try key "$DATA/workspace.key"
if ls "$DATA" >/dev/null 2>&1; then echo "READ listing"; else echo "denied listing"; fi
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
echo "server-secret=${SERVER_SECRET:-unset}"
echo "home-writable=$(touch "$HOME/.probe" 2>/dev/null && echo yes || echo no)"
echo probed > outputs/probe.txt && echo wrote-output
`

// probeJob is a job that runs probeScript against the server's data dir.
func probeJob(t *testing.T, s *server, compute string) string {
	t.Helper()
	// Up to / and down again: a relative path that reaches the data dir
	// from wherever the job works.
	rel := strings.Repeat("../", 30) + strings.TrimPrefix(s.dir, "/") + "/owner.token"
	yaml := "code: src\ncommand: sh probe.sh\nenvironment_variables:\n  DATA: " + s.dir + "\n  REL: " + rel + "\n"
	if compute != "" {
		yaml += "compute: azureml:" + compute + "\n"
	}
	return jobFile(t, yaml, map[string]string{"src/probe.sh": probeScript})
}

// checkProbe checks what probeScript printed: nothing of the data dir was
// read, the job ran as the job user, and it wrote its outputs.
func checkProbe(t *testing.T, s *server, name, log string) {
	t.Helper()
	if strings.Contains(log, s.token) {
		t.Fatalf("%s: the owner token is in the job's log", name)
	}
	mustContain(t, name+" log", log, "denied abs-token", "denied rel-token", "denied dotdot-token", "denied db",
		"denied wal", "denied key", "denied listing", "wrote-output", "home-writable=yes")
	if strings.Contains(log, "READ ") {
		t.Errorf("%s read the data dir:\n%s", name, log)
	}
	jobUID(t, name, log)
	dl := t.TempDir()
	s.mustFerry("job", "download", name, "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "probe.txt")); err != nil || string(got) != "probed\n" {
		t.Errorf("%s: downloaded output = %q, %v", name, got, err)
	}
}

// jobUID checks the "uid=U gid=G groups=G" line of a job's log: a root
// server's job runs as a uid of its own from the default range, with a
// group of the same number and no other, and it returns the uid.
func jobUID(t *testing.T, name, log string) int {
	t.Helper()
	m := regexp.MustCompile(`uid=(\d+) gid=(\d+) groups=([\d ]+)\n`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("%s: no identity line in its log:\n%s", name, log)
	}
	r, err := isolation.ParseUIDRange(isolation.DefaultUIDs)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(m[1])
	if uid < int(r.First) || uid > int(r.Last) || m[2] != m[1] || m[3] != m[1] {
		t.Errorf("%s ran as uid=%s gid=%s groups=%s; want a uid of %s with its own group alone", name, m[1], m[2], m[3], r)
	}
	return uid
}

// A job on the local target of a server that runs as root runs as a uid
// of its own (named after ferry-job), in a directory outside the data dir: it reads neither the
// owner token (the attack of issue 10: ../../../../owner.token), nor the
// store, nor the key, by relative or absolute path; it still writes its
// outputs and log.
func TestLocalJobCannotReadTheDataDir(t *testing.T) {
	localJobCannotReadTheDataDir(t, "--local-executor=false")
}

// The same when the job's shell is started by the local executor, not by
// a runner's shim.
func TestLocalExecutorJobCannotReadTheDataDir(t *testing.T) {
	localJobCannotReadTheDataDir(t, "--local-executor")
}

func localJobCannotReadTheDataDir(t *testing.T, args ...string) {
	testutil.RequireRoot(t)
	s := startServer(t, args...)
	r := s.mustFerry("job", "create", "-f", probeJob(t, s, ""), "--name", "probe-local", "--stream")
	mustContain(t, "summary", r.stderr, "job probe-local: Completed")
	checkProbe(t, s, "probe-local", r.stdout)
}

// The same on a process-provider cluster node; and neither the node's
// agent nor its jobs see what the server's shell exported.
func TestProcessNodeJobCannotReadTheDataDir(t *testing.T) {
	testutil.RequireRoot(t)
	t.Setenv("SERVER_SECRET", "exported-in-the-servers-shell")
	t.Setenv("FERRY_TOKEN", "owner-token-in-the-servers-shell") // the CLI's calls set their own
	s := startServer(t)
	s.mustFerry("compute", "create", "-f", clusterFile(t, "iso-cluster", "Standard_DS1_v2", 1, 60))
	s.mustFerry("job", "create", "-f", probeJob(t, s, "iso-cluster"), "--name", "probe-node")
	if j := s.waitStatus("probe-node", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("probe-node: %s (%s)", j.Status, j.StatusReason)
	}
	log := s.mustFerry("job", "stream", "probe-node").stdout
	checkProbe(t, s, "probe-node", log)
	mustContain(t, "probe-node log", log, "server-secret=unset")

	pids := processesWith("agent", "--server", s.url)
	if len(pids) == 0 {
		t.Fatal("no agent of the cluster runs")
	}
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"SERVER_SECRET=", "FERRY_TOKEN="} {
			if strings.Contains("\x00"+string(env), "\x00"+secret) {
				t.Errorf("agent %d has %s... of the server's environment", pid, secret)
			}
		}
	}
	// The node's directory is under the work dir, not the data dir.
	for _, pid := range pids {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(cwd, s.work+"/") {
			t.Errorf("agent %d works in %s, outside the work dir %s", pid, cwd, s.work)
		}
	}
}

// A data dir made beforehand with 0755, or loosened while the server was
// down, is private when the server runs: 0700, and its files (the store
// with its -wal and -shm, where jobs' environment_variables are kept, the
// owner token, the key) 0600.
func TestPremadeDataDirBecomesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, dir: dir, work: workDir(t), addr: freeAddr(t), home: t.TempDir(), output: &syncBuffer{}}
	s.start()
	t.Cleanup(s.end)
	check := func(when string) {
		t.Helper()
		// A job with a secret variable writes to the store, so its WAL is there.
		file := jobFile(t, "command: echo ok\nenvironment_variables:\n  API_KEY: hunter2\n", nil)
		s.mustFerry("job", "create", "-f", file, "--name", "secret-"+strings.ReplaceAll(when, " ", "-"))
		s.waitStatus("secret-"+strings.ReplaceAll(when, " ", "-"), "Completed")
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: data dir %v %v, want mode 0700", when, fi, err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			seen[e.Name()] = true
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: %s has mode %04o; others may read it", when, e.Name(), fi.Mode().Perm())
			}
		}
		for _, f := range []string{"ferry.db", "ferry.db-wal", "ferry.db-shm", "owner.token", "workspace.key"} {
			if !seen[f] {
				t.Errorf("%s: %s is not in the data dir (%v)", when, f, seen)
			}
		}
	}
	check("fresh start")

	s.stop()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ferry.db", "ferry.db-wal", "ferry.db-shm", "owner.token", "workspace.key"} {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	s.start()
	check("after restart")
}

// `ferry compute exec` on a process-provider instance of a root server
// runs as ferry-job too, in a home of its own: no root shell on the
// server's host, and no owner token.
func TestInstanceSessionRunsAsTheJobUser(t *testing.T) {
	testutil.RequireRoot(t)
	s := startSessionServer(t)
	s.makeInstance("iso-box", "")
	r := s.mustFerry("compute", "exec", "iso-box", "--",
		`id -u; echo "home=$HOME"; touch "$HOME/x" && echo home-writable; cat "`+s.dir+`/owner.token" >/dev/null 2>&1 && echo READ-token || echo denied-token`)
	u, err := isolation.Lookup(isolation.DefaultUser)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "exec", r.stdout, strconv.Itoa(int(u.UID))+"\n", "home-writable", "denied-token")
	if strings.Contains(r.stdout, "READ-token") || strings.Contains(r.stdout, s.token) {
		t.Errorf("a session read the owner token:\n%s", r.stdout)
	}
}
