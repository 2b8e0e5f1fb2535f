package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/nodeproto"
)

func TestFactsAreSane(t *testing.T) {
	cfg := Config{Server: "http://127.0.0.1:9", Version: "v-test", Env: []string{}}
	f := gatherFacts(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if f.CPUs < 1 || f.CPUs > runtime.NumCPU() {
		t.Errorf("CPUs = %d, want 1..%d", f.CPUs, runtime.NumCPU())
	}
	if f.MemoryBytes < 64<<20 || f.MemoryBytes > 1<<50 {
		t.Errorf("MemoryBytes = %d, not a plausible memory size", f.MemoryBytes)
	}
	host, _ := os.Hostname()
	want := nodeproto.Facts{Hostname: host, Address: "127.0.0.1", OS: runtime.GOOS, Arch: runtime.GOARCH, Version: "v-test",
		CPUs: f.CPUs, MemoryBytes: f.MemoryBytes, GPUs: f.GPUs}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("facts (-want +got):\n%s", d)
	}
	cfg.Address = "10.1.2.3"
	if f := gatherFacts(context.Background(), cfg, slog.New(slog.DiscardHandler)); f.Address != "10.1.2.3" {
		t.Errorf("Address = %q, want the --address given", f.Address)
	}
}

func TestMemTotal(t *testing.T) {
	n, err := memTotal("MemTotal:       24684096 kB\nMemFree:  1 kB\n")
	if err != nil || n != 24684096*1024 {
		t.Errorf("memTotal = %d, %v", n, err)
	}
	if _, err := memTotal("MemFree: 1 kB\n"); err == nil {
		t.Error("memTotal without MemTotal: no error")
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupLimits(t *testing.T) {
	t.Run("v2", func(t *testing.T) {
		root := t.TempDir()
		writeFiles(t, root, map[string]string{
			"cpu.max":                 "max 100000\n",
			"memory.max":              "max\n",
			"kube/cpu.max":            "250000 100000\n", // 2.5 CPUs
			"kube/memory.max":         "8589934592\n",
			"kube/pod1/cpu.max":       "max 100000\n",
			"kube/pod1/memory.max":    "4294967296\n", // the tightest
			"kube/pod1/ctr/other.txt": "",
		})
		cpus, mem := cgroupLimits(root, "0::/kube/pod1/ctr\n")
		if cpus != 2.5 || mem != 4<<30 {
			t.Errorf("cgroupLimits = %v CPUs, %d bytes; want 2.5, 4GiB", cpus, mem)
		}
		if n := cpuCount(16, cpus); n != 3 {
			t.Errorf("cpuCount(16, 2.5) = %d, want 3", n)
		}
		if n := cpuCount(2, cpus); n != 2 {
			t.Errorf("cpuCount(2, 2.5) = %d, want the affinity's 2", n)
		}
	})
	t.Run("v1 inside a container", func(t *testing.T) {
		root := t.TempDir()
		// The container sees its own cgroup at the mount's root, while
		// /proc/self/cgroup names the host's path.
		writeFiles(t, root, map[string]string{
			"cpu/cpu.cfs_quota_us":           "150000\n",
			"cpu/cpu.cfs_period_us":          "100000\n",
			"memory/memory.limit_in_bytes":   "9223372036854771712\n",
			"memory/docker/memory.ignored":   "",
			"cpuacct/cpuacct.usage_percpu":   "",
			"memory/x/memory.limit_in_bytes": "1073741824\n",
		})
		self := "12:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
		cpus, mem := cgroupLimits(root, self)
		if cpus != 1.5 || mem != 9223372036854771712 {
			t.Errorf("cgroupLimits = %v CPUs, %d bytes; want 1.5 and v1's no-limit number", cpus, mem)
		}
	})
	t.Run("none", func(t *testing.T) {
		if cpus, mem := cgroupLimits(t.TempDir(), "0::/\n"); cpus != 0 || mem != 0 {
			t.Errorf("cgroupLimits with no files = %v, %d; want 0, 0", cpus, mem)
		}
	})
}

// fakeNvidiaSMI puts an nvidia-smi on PATH that prints out and exits with
// code. The real tool is not on the machines these tests run on, and the
// agent must work the same with the real one: the script checks that it
// was asked the agent's query.
func fakeNvidiaSMI(t *testing.T, out string, code int) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n" +
		"[ \"$1\" = \"" + gpuQuery[0] + "\" ] && [ \"$2\" = \"" + gpuQuery[1] + "\" ] || { echo \"unexpected arguments: $*\" >&2; exit 9; }\n" +
		"cat <<'EOF'\n" + out + "EOF\n" +
		"echo 'driver says hello' >&2\n" +
		"exit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

const fourGPUs = `0, NVIDIA A100-SXM4-80GB, 81920, GPU-aaaa1111-0000-0000-0000-000000000000
1, NVIDIA A100-SXM4-80GB, 81920, GPU-bbbb2222-0000-0000-0000-000000000000
2, NVIDIA H100 80GB HBM3, 81559, GPU-cccc3333-0000-0000-0000-000000000000
3, Some, GPU, with commas, [N/A], GPU-dddd4444-0000-0000-0000-000000000000
`

func TestGPUsFromNvidiaSMI(t *testing.T) {
	fakeNvidiaSMI(t, fourGPUs, 0)
	all := []nodeproto.GPU{
		{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryMB: 81920},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryMB: 81920},
		{Index: 2, Name: "NVIDIA H100 80GB HBM3", MemoryMB: 81559},
		{Index: 3, Name: "Some, GPU, with commas", MemoryMB: 0},
	}
	for _, tc := range []struct {
		name    string
		visible *string
		want    []nodeproto.GPU
	}{
		{"unset: all", nil, all},
		{"indices", ptr("2,0"), []nodeproto.GPU{all[0], all[2]}},
		{"spaces", ptr(" 1 , 3 "), []nodeproto.GPU{all[1], all[3]}},
		{"empty hides all", ptr(""), []nodeproto.GPU{}},
		{"an invalid entry ends the list, as in CUDA", ptr("1,7,2"), []nodeproto.GPU{all[1]}},
		{"-1 hides all", ptr("-1"), []nodeproto.GPU{}},
		{"uuid prefixes", ptr("GPU-cccc,GPU-aaaa1111"), []nodeproto.GPU{all[0], all[2]}},
		{"MIG ids are not GPUs of the list", ptr("MIG-x,0"), []nodeproto.GPU{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.visible != nil {
				env = []string{"CUDA_VISIBLE_DEVICES=" + *tc.visible}
			}
			v, ok := lookupEnv(env, "CUDA_VISIBLE_DEVICES")
			got := probeGPUs(context.Background(), v, ok, slog.New(slog.DiscardHandler))
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("GPUs (-want +got):\n%s", d)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestNvidiaSMIFailing(t *testing.T) {
	fakeNvidiaSMI(t, "", 3)
	var logs syncBuffer
	got := probeGPUs(context.Background(), "", false, slog.New(slog.NewTextHandler(&logs, nil)))
	if len(got) != 0 {
		t.Errorf("GPUs from a failing nvidia-smi = %v, want none", got)
	}
	if !strings.Contains(logs.String(), "nvidia-smi failed") || !strings.Contains(logs.String(), "driver says hello") {
		t.Errorf("no log line with nvidia-smi's error; logs:\n%s", logs.String())
	}
}

func TestNvidiaSMIGarbage(t *testing.T) {
	fakeNvidiaSMI(t, "No devices were found\n", 0)
	var logs syncBuffer
	if got := probeGPUs(context.Background(), "", false, slog.New(slog.NewTextHandler(&logs, nil))); len(got) != 0 {
		t.Errorf("GPUs = %v, want none", got)
	}
	if !strings.Contains(logs.String(), "not understood") {
		t.Errorf("no log line; logs:\n%s", logs.String())
	}
}

func TestNoNvidiaSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var logs syncBuffer
	if got := probeGPUs(context.Background(), "", false, slog.New(slog.NewTextHandler(&logs, nil))); got != nil {
		t.Errorf("GPUs without nvidia-smi = %v, want none", got)
	}
	if logs.String() != "" {
		t.Errorf("a machine without nvidia-smi is normal, yet the agent logged:\n%s", logs.String())
	}
}

func TestAddressToward(t *testing.T) {
	for _, server := range []string{"http://127.0.0.1:8580", "https://127.0.0.1", "http://localhost:1"} {
		got, err := addressToward(server)
		if err != nil || !strings.HasPrefix(got, "127.") && got != "::1" {
			t.Errorf("addressToward(%s) = %q, %v; want a loopback address", server, got, err)
		}
	}
}
