package environment

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseContainerOptions(t *testing.T) {
	got, err := ParseContainerOptions("512m", "--cpus=2 -m 1g --shm-size 2g --ipc=host --pids-limit -1 --ulimit memlock=-1:-1 --ulimit nofile=1024")
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerOptions{NanoCPUs: 2e9, Memory: 1 << 30, ShmSize: 2 << 30, IPC: "host", PidsLimit: -1,
		Ulimits: map[string][2]int64{"memlock": {-1, -1}, "nofile": {1024, 1024}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for in, wantErr := range map[string]string{
		"--privileged":          "--privileged is not allowed",
		"-v /:/host":            "-v is not allowed",
		"--network=none":        "--network is not allowed",
		"--cpus":                "needs a value",
		"--cpus lots":           "positive number of CPUs",
		"--memory 12q":          "not a size",
		"--ipc container:x":     "host, private or shareable",
		"--ulimit nofile=9:1":   "name=soft[:hard]",
		"python":                "not a flag",
		"--pids-limit 1.5":      "whole number",
		"--shm-size=-1g":        "not a size",
		"--memory 99999999999g": "not a size",
	} {
		_, err := ParseContainerOptions("", in)
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "resources.docker_args") {
			t.Errorf("%q: err %v, want one naming resources.docker_args and saying %q", in, err, wantErr)
		}
	}
	if _, err := ParseContainerOptions("lots", ""); err == nil || !strings.Contains(err.Error(), "resources.shm_size") {
		t.Errorf("bad shm_size: %v", err)
	}
}

// FuzzParseContainerOptions: docker_args come from job files; no input may
// panic, and an accepted one has no negative sizes.
func FuzzParseContainerOptions(f *testing.F) {
	f.Add("2g", "--cpus 1.5 --memory=1g --ulimit nofile=1:2")
	f.Add("", "--ipc host --pids-limit -1")
	f.Fuzz(func(t *testing.T, shm, args string) {
		o, err := ParseContainerOptions(shm, args)
		if err != nil {
			return
		}
		if o.Memory < 0 || o.ShmSize < 0 || o.NanoCPUs < 0 {
			t.Fatalf("accepted negative limits %+v from %q %q", o, shm, args)
		}
		for n, l := range o.Ulimits {
			if l[0] > l[1] {
				t.Fatalf("ulimit %s soft %d above hard %d", n, l[0], l[1])
			}
		}
	})
}
