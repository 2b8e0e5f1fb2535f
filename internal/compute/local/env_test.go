package local

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunnerEnvDropsTheServersFerryVariables(t *testing.T) {
	got := runnerEnv([]string{"PATH=/bin", "FERRY_TOKEN=owner", "FERRY_URL=http://x", "LD_LIBRARY_PATH=/opt/cuda", "FERRY_RUN_TOKEN=stale"}, "run-1")
	want := []string{"PATH=/bin", "LD_LIBRARY_PATH=/opt/cuda", "FERRY_RUN_TOKEN=run-1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("runnerEnv (-want +got):\n%s", d)
	}
	if runsDirMode("") != 0o700 || runsDirMode("ferry-job") != 0o711 {
		t.Errorf("runsDirMode: %04o without an account, %04o with one", runsDirMode(""), runsDirMode("ferry-job"))
	}
}
