package process

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAgentEnvKeepsOnlyWhatAMachineNeeds(t *testing.T) {
	server := []string{
		"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C",
		"FERRY_TOKEN=owner-secret", "AWS_SECRET_ACCESS_KEY=k", "GITHUB_TOKEN=g", "SSH_AUTH_SOCK=/tmp/agent",
		"https_proxy=http://proxy:3128", "DOCKER_HOST=unix:///run/docker.sock", "PIP_INDEX_URL=http://mirror/simple",
		"CONDA_PKGS_DIRS=/opt/pkgs", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "noequals",
	}
	want := []string{
		"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C",
		"https_proxy=http://proxy:3128", "DOCKER_HOST=unix:///run/docker.sock", "PIP_INDEX_URL=http://mirror/simple",
		"CONDA_PKGS_DIRS=/opt/pkgs", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
	}
	if d := cmp.Diff(want, AgentEnv(server)); d != "" {
		t.Errorf("AgentEnv (-want +got):\n%s", d)
	}
}

// An agent started by the provider does not see what the server's shell
// exported: its /proc/PID/environ (what the agent, its runners and their
// jobs could read) has the join token and the few variables of AgentEnv,
// no FERRY_TOKEN and no other variable. Not parallel: it sets the
// environment the provider starts agents from.
func TestAgentDoesNotInheritTheServersEnvironment(t *testing.T) {
	t.Setenv("FERRY_TOKEN", "owner-token-of-the-servers-shell")
	t.Setenv("CLOUD_SECRET", "a-cloud-key")
	t.Setenv("LANG", "C.UTF-8")
	p := newProvider(t, Config{})
	m := launch(t, p, shAgent("pool", "env", 0, sleeper))
	waitFile(t, filepath.Join(m.Labels["dir"], "ready"))
	raw, err := os.ReadFile("/proc/" + m.Labels["pid"] + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0}) {
		k, _, _ := strings.Cut(string(kv), "=")
		names = append(names, k)
		if strings.Contains(string(kv), "owner-token-of-the-servers-shell") || strings.Contains(string(kv), "a-cloud-key") {
			t.Errorf("the agent's environment holds the server's %s", k)
		}
	}
	shell := map[string]bool{"PWD": true, "OLDPWD": true, "SHLVL": true, "_": true} // the test agent's sh sets them
	for _, k := range names {
		if k != "FERRY_JOIN_TOKEN" && !shell[k] && len(AgentEnv([]string{k + "=x"})) == 0 {
			t.Errorf("the agent got %s, which AgentEnv leaves out", k)
		}
	}
	for _, k := range []string{"FERRY_JOIN_TOKEN", "PATH", "LANG"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+k+" ") {
			t.Errorf("the agent lacks %s; it has %v", k, names)
		}
	}
}

// With RunAs, agents are told to start jobs as that account, and the way
// to their runs is passable (0711) but not listable by it.
func TestRunAsIsPassedAndTheWayIsPassable(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nodes")
	p := newProvider(t, Config{Dir: dir, RunAs: "nobody"})
	m := launch(t, p, shAgent("pool", "a", 0, sleeper))
	waitFile(t, filepath.Join(m.Labels["dir"], "ready"))
	if log := waitFile(t, m.Labels["log"]); !strings.HasSuffix(log, "--dir "+m.Labels["dir"]+" --run-as nobody") {
		t.Errorf("agent arguments: %q", log)
	}
	for _, d := range []string{dir, filepath.Join(dir, "pool"), m.Labels["dir"]} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o711 {
			t.Errorf("%s has mode %04o, want 0711", d, fi.Mode().Perm())
		}
	}
	if err := p.Terminate(context.Background(), m.ID); err != nil {
		t.Fatal(err)
	}
}
