package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// Attached machines (type virtualmachine) against real OpenSSH servers on
// loopback ports: the machine is this host, reached as another user over
// SSH, as Ferry would reach a team's own server.

// vmFile writes an attached machine's compute file; login is the
// ssh_settings lines after admin_username.
func vmFile(t *testing.T, name string, sshd *testutil.SSHD, user, login, hostKey string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if files == nil {
		files = map[string]string{}
	}
	files["vm.yml"] = fmt.Sprintf(`$schema: https://azuremlschemas.azureedge.net/latest/vmCompute.schema.json
name: %s
type: virtualmachine
address: %s
host_key: %q
ssh_settings:
  admin_username: %s
  ssh_port: %d
%s`, name, sshd.Address, hostKey, user, sshd.Port, login)
	writeFiles(t, dir, files)
	return filepath.Join(dir, "vm.yml")
}

// homeOf is a local user's home directory.
func homeOf(t *testing.T, name string) string {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u.HomeDir
}

// tree lists every path under dir (relative), sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// procsUnder lists the command lines of live processes whose binary or
// working directory is under dir.
func procsUnder(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		if strings.HasPrefix(exe, dir+"/") || strings.HasPrefix(cwd, dir+"/") || cwd == dir {
			raw, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return out
}

type computeJSON struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Spec  struct {
		HostKey     string         `json:"host_key"`
		SSHSettings map[string]any `json:"ssh_settings"`
	} `json:"spec"`
}

func (s *server) computeJSON(name string) computeJSON {
	s.t.Helper()
	var c computeJSON
	if err := json.Unmarshal([]byte(s.mustFerry("compute", "show", name, "-o", "json").stdout), &c); err != nil {
		s.t.Fatal(err)
	}
	return c
}

// noSecrets fails the test when any of the secrets appears in what.
func noSecrets(t *testing.T, where, what string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if sec != "" && strings.Contains(what, sec) {
			t.Errorf("a secret appears in %s", where)
		}
	}
}

// keyBody is the base64 body of a PEM private key, the part that must
// never leak (its header line is no secret).
func keyBody(pem []byte) []string {
	var out []string
	for _, l := range strings.Split(string(pem), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// An attached machine with password login: attach, a job with logs and
// outputs, cancel, secrets kept out of every output, and detach that
// leaves the user's home as it was.
func TestAttachedMachinePassword(t *testing.T) {
	sshd := testutil.StartSSHD(t)
	sshd.RequirePassword(t)
	home := homeOf(t, sshd.PasswordUser)
	// A failed test leaves what a failed detach leaves; clean it for the next.
	t.Cleanup(func() {
		killUnder(t, filepath.Join(home, ".ferry-agent"))
		os.RemoveAll(filepath.Join(home, ".ferry-agent"))
	})
	before := tree(t, home)
	s := startServer(t)
	var outputs strings.Builder
	ferry := func(args ...string) result {
		t.Helper()
		r := s.ferry(args...)
		outputs.WriteString(r.stdout + r.stderr)
		return r
	}

	// A wrong password: refused at attach, naming the field, nothing made.
	bad := vmFile(t, "box", sshd, sshd.PasswordUser, "  admin_password: not-the-password-x1\n", sshd.HostKeyLine, nil)
	r := ferry("compute", "attach", "-f", bad)
	if r.code == 0 {
		t.Fatalf("attached with a wrong password: %s", r)
	}
	mustContain(t, "wrong password", r.stderr, "ssh_settings.admin_password", "refused the password")
	noSecrets(t, "wrong-password error", r.stdout+r.stderr, "not-the-password-x1")
	if strings.Contains(ferry("compute", "list").stdout, "box") {
		t.Fatal("a refused attach left a compute")
	}

	vm := vmFile(t, "box", sshd, sshd.PasswordUser, "  admin_password: "+sshd.Password+"\n", sshd.HostKeyLine, nil)
	r = ferry("compute", "attach", "-f", vm)
	if r.code != 0 {
		t.Fatalf("attach: %s", r)
	}
	c := s.computeJSON("box")
	if c.Spec.SSHSettings["admin_password"] != "[secret]" {
		t.Errorf("compute show gives admin_password %v, want [secret]", c.Spec.SSHSettings["admin_password"])
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("compute show box:\n%s\nserver output:\n%s", s.ferry("compute", "show", "box").stdout, s.output.String())
		}
	})
	nodes := s.waitNodes("box", 1, "Idle")
	if nodes[0].Address != "127.0.0.1" {
		t.Errorf("node address %q", nodes[0].Address)
	}
	agentDir := filepath.Join(home, ".ferry-agent")
	if len(procsUnder(agentDir)) == 0 {
		t.Fatalf("no agent runs under %s", agentDir)
	}

	// A job with logs and outputs, run by the agent as the login user.
	job := jobFile(t, `command: >-
  echo "hello from $(id -un)" && python3 train.py
code: .
compute: azureml:box
`, map[string]string{"train.py": "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/model.txt', 'w').write('weights\\n')\nprint('trained')\n"})
	r = ferry("job", "create", "-f", job, "--name", "vm-1", "--stream")
	if r.code != 0 {
		t.Fatalf("job on the attached machine: %s", r)
	}
	mustContain(t, "job log", r.stdout, "hello from "+sshd.PasswordUser, "trained")
	dl := t.TempDir()
	ferry("job", "download", "vm-1", "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "model.txt")); err != nil || string(got) != "weights\n" {
		t.Fatalf("output = %q, %v", got, err)
	}

	// Cancel: the job's processes on the machine end.
	job = jobFile(t, "command: sleep 313\ncompute: azureml:box\n", nil)
	ferry("job", "create", "-f", job, "--name", "vm-2")
	s.waitStatus("vm-2", "Running")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(strings.Join(procsUnder(agentDir), "\n"), "sleep 313") {
		if time.Now().After(deadline) {
			t.Fatalf("the job's sleep never ran under %s", agentDir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ferry("job", "cancel", "vm-2")
	if j := s.waitStatus("vm-2", "Canceled", "Failed", "Completed"); j.Status != "Canceled" {
		t.Fatalf("vm-2: %s (%s)", j.Status, j.StatusReason)
	}
	deadline = time.Now().Add(30 * time.Second)
	for strings.Contains(strings.Join(procsUnder(agentDir), "\n"), "sleep 313") {
		if time.Now().After(deadline) {
			t.Fatalf("the canceled job's sleep still runs: %v", procsUnder(agentDir))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Secrets appear in no API response, CLI output, server log or, in
	// plain text, in the server's data.
	for _, p := range []string{"/v1/computes", "/v1/computes/box", "/v1/computes/box/nodes", "/openapi.json"} {
		_, body := s.call("GET", p, s.token, nil)
		noSecrets(t, "GET "+p, string(body), sshd.Password)
	}
	noSecrets(t, "CLI output", outputs.String(), sshd.Password)
	noSecrets(t, "the server's log", s.output.String(), sshd.Password)
	for _, f := range []string{"ferry.db", "ferry.db-wal"} {
		raw, _ := os.ReadFile(filepath.Join(s.dir, f))
		noSecrets(t, f, string(raw), sshd.Password)
	}

	// Detach: the agent stops and nothing Ferry put there is left.
	r = ferry("compute", "detach", "box")
	if r.code != 0 {
		t.Fatalf("detach: %s", r)
	}
	if got := s.ferry("compute", "show", "box"); got.code == 0 {
		t.Fatalf("box is still there after detach: %s", got.stdout)
	}
	if ps := procsUnder(agentDir); len(ps) > 0 {
		t.Fatalf("processes left after detach: %v", ps)
	}
	if after := tree(t, home); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("detach left the home of %s changed:\nbefore %v\nafter  %v", sshd.PasswordUser, before, after)
	}
}

// Host keys: a wrong pinned key is refused; trust-on-first-use records the
// key and refuses a changed one from then on; a machine that goes away
// mid-job fails the job as node lost.
func TestAttachedMachineHostKeyAndLoss(t *testing.T) {
	sshd := testutil.StartSSHD(t)
	s := startServer(t, "--node-lease", "4s")
	key := string(sshd.ClientKey)
	login := "  ssh_private_key_file: id_test\n"
	files := func() map[string]string { return map[string]string{"id_test": key} }

	// A pinned key that is not the machine's.
	other := testutil.StartSSHD(t)
	r := s.ferry("compute", "attach", "-f", vmFile(t, "keyed", sshd, sshd.User, login, other.HostKeyLine, files()))
	if r.code == 0 {
		t.Fatalf("attached a machine whose host key is not the pinned one: %s", r)
	}
	mustContain(t, "wrong host key", r.stderr, "host_key", "host key mismatch", sshd.Fingerprint)
	// No host key at all: refused, showing the machine's fingerprint.
	r = s.ferry("compute", "attach", "-f", vmFile(t, "keyed", sshd, sshd.User, login, "", files()))
	if r.code == 0 {
		t.Fatalf("attached a machine with no host_key: %s", r)
	}
	mustContain(t, "missing host key", r.stderr, "host_key", "is required", sshd.Fingerprint, "trust-on-first-use")

	// Trust on first use: the key Ferry saw is pinned.
	s.mustFerry("compute", "attach", "-f", vmFile(t, "keyed", sshd, sshd.User, login, "trust-on-first-use", files()))
	c := s.computeJSON("keyed")
	if f := strings.Fields(sshd.HostKeyLine); !strings.Contains(c.Spec.HostKey, f[len(f)-1]) {
		t.Fatalf("host_key after trust-on-first-use = %q, want the machine's key %s", c.Spec.HostKey, f[len(f)-1])
	}
	if c.Spec.SSHSettings["ssh_private_key"] != "[secret]" {
		t.Errorf("compute show gives ssh_private_key %v, want [secret]", c.Spec.SSHSettings["ssh_private_key"])
	}
	_, body := s.call("GET", "/v1/computes/keyed", s.token, nil)
	for _, l := range keyBody(sshd.ClientKey) {
		noSecrets(t, "GET /v1/computes/keyed", string(body), l)
		noSecrets(t, "the server's log", s.output.String(), l)
	}
	s.waitNodes("keyed", 1, "Idle")
	agentDir := filepath.Join(homeOf(t, sshd.User), ".ferry-agent")
	// Ferry cannot clean a machine that went away or that it no longer
	// trusts; the machine's admin would.
	t.Cleanup(func() { killUnder(t, agentDir); os.RemoveAll(agentDir) })

	// The machine goes away mid-job: its agent and job die with it and it
	// stops answering SSH. The job fails as node lost.
	s.mustFerry("job", "create", "-f", jobFile(t, "command: sleep 317\ncompute: azureml:keyed\n", nil), "--name", "lost-1")
	s.waitStatus("lost-1", "Running")
	sshd.Stop()
	killUnder(t, agentDir)
	j := s.waitStatus("lost-1", "Failed", "Completed", "Canceled")
	if j.Status != "Failed" || !strings.Contains(j.StatusReason+j.Error, "node lost") {
		t.Fatalf("lost-1: %s (%s; %s), want Failed with node lost", j.Status, j.StatusReason, j.Error)
	}

	// It comes back reinstalled, with another host key: Ferry refuses it.
	sshd2 := testutil.RestartSSHD(t, sshd)
	sshd2.ChangeHostKey(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		show := s.mustFerry("compute", "show", "keyed", "--events", "0").stdout
		if strings.Contains(show, "host key mismatch") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refused relaunch after the host key changed:\n%s", show)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ps := procsUnder(agentDir); len(ps) > 0 {
		t.Fatalf("an agent was started on a machine with a changed host key: %v", ps)
	}
	s.mustFerry("compute", "detach", "keyed")
}

// killUnder kills every process running from dir, as a machine that goes
// away would take them.
func killUnder(t *testing.T, dir string) {
	t.Helper()
	for range 20 {
		ps := procsUnder(dir)
		if len(ps) == 0 {
			return
		}
		for _, p := range ps {
			pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The machine cannot reach the server (its URL does not answer there): the
// agent reaches it through a reverse tunnel over the SSH connection, and a
// job runs with logs and outputs.
func TestAttachedMachineReverseTunnel(t *testing.T) {
	sshd := testutil.StartSSHD(t)
	// 127.0.0.2:9 answers nothing (connection refused): the URL the
	// server gives out is one the machine cannot reach.
	s := startServer(t, "--advertise-url", "http://127.0.0.2:9")
	s.mustFerry("compute", "attach", "-f", vmFile(t, "far", sshd, sshd.User, "  ssh_private_key_file: id_test\n", sshd.HostKeyLine,
		map[string]string{"id_test": string(sshd.ClientKey)}))
	s.waitNodes("far", 1, "Idle")
	agentDir := filepath.Join(homeOf(t, sshd.User), ".ferry-agent")
	t.Cleanup(func() { killUnder(t, agentDir); os.RemoveAll(agentDir) })
	var agent string
	for _, p := range procsUnder(agentDir) {
		if strings.Contains(p, " agent ") {
			agent = p
		}
	}
	if !strings.Contains(agent, "--server http://127.0.0.1:") {
		t.Fatalf("the agent does not use the tunnel: %q", agent)
	}
	mustContain(t, "server log", s.output.String(), "reverse tunnel")

	job := jobFile(t, "command: echo through the tunnel && mkdir -p outputs && echo ok > outputs/t.txt\ncompute: azureml:far\n", nil)
	r := s.mustFerry("job", "create", "-f", job, "--name", "tun-1", "--stream")
	mustContain(t, "job log", r.stdout, "through the tunnel")
	dl := t.TempDir()
	s.mustFerry("job", "download", "tun-1", "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "t.txt")); err != nil || string(got) != "ok\n" {
		t.Fatalf("output = %q, %v", got, err)
	}

	// The server is killed and comes back: the tunnel is re-opened on the
	// same port and the agent carries on.
	s.kill9()
	s.start()
	job = jobFile(t, "command: echo after the restart\ncompute: azureml:far\n", nil)
	r = s.mustFerry("job", "create", "-f", job, "--name", "tun-2", "--stream")
	mustContain(t, "job log after restart", r.stdout, "after the restart")
	s.mustFerry("compute", "detach", "far")
	if ps := procsUnder(agentDir); len(ps) > 0 {
		t.Fatalf("processes left after detach: %v", ps)
	}
	if _, err := os.Stat(agentDir); !os.IsNotExist(err) {
		t.Fatalf("%s is left after detach (%v)", agentDir, err)
	}
}

// An ssh fleet: a cluster of existing machines. It scales from zero onto
// them for a burst, back to zero when idle, and each scale-down stops the
// agent, cleans up and runs the power-off command.
func TestSSHFleetScalesOverExistingMachines(t *testing.T) {
	a, b := testutil.StartSSHD(t), testutil.StartSSHD(t)
	s := startServer(t)
	dir := t.TempDir()
	marks := t.TempDir()
	agentDir := filepath.Join(homeOf(t, a.User), ".ferry-agent")
	t.Cleanup(func() { killUnder(t, agentDir); os.RemoveAll(agentDir) })
	writeFiles(t, dir, map[string]string{"id_fleet": string(a.ClientKey), "fleet.yml": fmt.Sprintf(`name: fleet
type: amlcompute
min_instances: 0
max_instances: 2
idle_time_before_scale_down: 1
provider:
  type: ssh
  hosts:
    - {address: 127.0.0.1, port: %d, host_key: %q}
    - {address: 127.0.0.1, port: %d, host_key: trust-on-first-use}
  ssh_settings:
    admin_username: %s
    ssh_private_key_file: id_fleet
  power_off_command: touch %s/powered-off-$(date +%%s%%N)
`, a.Port, a.HostKeyLine, b.Port, a.User, marks)})
	// Both machines accept the same key (the second server gets the first's).
	b.Authorize(t, publicKeyOf(t, a.ClientKey))
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "fleet.yml"))
	var c struct {
		Spec struct {
			Provider map[string]any `json:"provider"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("compute", "show", "fleet", "-o", "json").stdout), &c); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(c.Spec.Provider)
	if f := strings.Fields(b.HostKeyLine); !strings.Contains(string(raw), f[len(f)-1]) {
		t.Errorf("the second host's key was not pinned: %s", raw)
	}
	if !strings.Contains(string(raw), `"ssh_private_key":"[secret]"`) {
		t.Errorf("the fleet's key is not redacted: %s", raw)
	}
	for _, l := range keyBody(a.ClientKey) {
		noSecrets(t, "compute show", string(raw), l)
	}

	job := jobFile(t, "command: echo on $(hostname) && sleep 3\ncompute: azureml:fleet\n", nil)
	s.mustFerry("job", "create", "-f", job, "--name", "f-1")
	s.mustFerry("job", "create", "-f", job, "--name", "f-2")
	s.waitStatus("f-1", "Running")
	s.waitStatus("f-2", "Running")
	if n := len(s.nodes("fleet")); n != 2 {
		t.Fatalf("fleet runs two jobs on %d nodes", n)
	}
	for _, j := range []string{"f-1", "f-2"} {
		if got := s.waitStatus(j, "Completed", "Failed"); got.Status != "Completed" {
			t.Fatalf("%s: %s (%s)", j, got.Status, got.StatusReason)
		}
	}
	s.waitNodes("fleet", 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(marks)
		if len(ents) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("power-off ran %d times, want 2", len(ents))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ps := procsUnder(agentDir); len(ps) > 0 {
		t.Fatalf("processes left after scale-down: %v", ps)
	}
	if _, err := os.Stat(agentDir); !os.IsNotExist(err) {
		t.Fatalf("%s left after scale-down (%v)", agentDir, err)
	}
}

// publicKeyOf is the authorized_keys line of a private key.
func publicKeyOf(t *testing.T, pem []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(f, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh-keygen", "-y", "-f", f).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
