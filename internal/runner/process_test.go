package runner

import (
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/environment"
)

func TestContainerConfigMountsLimitsAndVariables(t *testing.T) {
	opts, err := environment.ParseContainerOptions("1g", "--cpus 1.5 --memory=2g --ipc host --pids-limit 100 --ulimit nofile=1024:4096")
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc := containerConfig(containerJob{
		Image: "ferry-env:abc", Command: "python train.py", Dir: "/runs/j/1", ReadOnly: []string{"/envs-mlflow-shim/h"}, WorkDir: "/runs/j/1/wd",
		Spool: "/runs/j/1/std.log", Env: []string{"A=1"}, Labels: map[string]string{"ferry.job": "j"}, Opts: opts,
		User: "999:998",
	})
	if cfg.Image != "ferry-env:abc" || cfg.WorkingDir != "/runs/j/1/wd" || cfg.Labels["ferry.job"] != "j" {
		t.Errorf("config %+v", cfg)
	}
	if d := cmp.Diff([]string{"A=1"}, cfg.Env); d != "" {
		t.Errorf("env: %s", d)
	}
	// The command runs under a wrapper that appends to the spool; the
	// spool and the command are arguments, never spliced into shell text.
	if n := len(cfg.Cmd); n != 5 || cfg.Cmd[3] != "/runs/j/1/std.log" || cfg.Cmd[4] != "python train.py" {
		t.Errorf("cmd %q", cfg.Cmd)
	}
	if cfg.User != "999:998" {
		t.Errorf("user %q, want the job's 999:998", cfg.User)
	}
	if d := cmp.Diff([]string{"/runs/j/1:/runs/j/1", "/envs-mlflow-shim/h:/envs-mlflow-shim/h:ro"}, hc.Binds); d != "" {
		t.Errorf("binds: %s", d)
	}
	if hc.NetworkMode != "host" || hc.Init == nil || !*hc.Init {
		t.Errorf("network %q init %v", hc.NetworkMode, hc.Init)
	}
	if hc.NanoCPUs != 1_500_000_000 || hc.Memory != 2<<30 || hc.ShmSize != 1<<30 || hc.IpcMode != "host" ||
		hc.PidsLimit == nil || *hc.PidsLimit != 100 || len(hc.Ulimits) != 1 || hc.Ulimits[0].Hard != 4096 {
		t.Errorf("limits: %+v", hc.Resources)
	}
	if hc.DeviceRequests != nil {
		t.Errorf("a node without GPUs got device requests %+v", hc.DeviceRequests)
	}
}

func TestGPURequests(t *testing.T) {
	gpu := [][]string{{"gpu"}}
	for _, c := range []struct {
		visible string
		has     bool
		want    []container.DeviceRequest
	}{
		{"", false, nil},
		{"", true, []container.DeviceRequest{{Driver: "nvidia", Count: -1, Capabilities: gpu}}},
		{"all", true, []container.DeviceRequest{{Driver: "nvidia", Count: -1, Capabilities: gpu}}},
		{"none", true, nil},
		{"-1", true, nil},
		{"0,2", true, []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"0", "2"}, Capabilities: gpu}}},
		{" 1 ", true, []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"1"}, Capabilities: gpu}}},
	} {
		if d := cmp.Diff(c.want, gpuRequests(c.visible, c.has)); d != "" {
			t.Errorf("gpuRequests(%q, %v) (-want +got):\n%s", c.visible, c.has, d)
		}
	}
}
