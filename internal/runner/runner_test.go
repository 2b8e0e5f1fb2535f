package runner

import (
	"os/exec"
	"testing"
)

func TestCommandSubstitution(t *testing.T) {
	got := Command("python t.py --d ${{inputs.data}} --n ${{ inputs.n }} --o ${{outputs.model}} ${{inputs.data}}",
		map[string]string{"data": "/in/data", "n": "5"}, map[string]string{"model": "/out/model"})
	want := "python t.py --d /in/data --n 5 --o /out/model /in/data"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestExitCodeOfSignaledProcessIsLikeAShell(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 7", 7}, {"kill -TERM $$", 128 + 15}, {"kill -KILL $$", 128 + 9}} {
		cmd := exec.Command("/bin/sh", "-c", c.script)
		err := cmd.Run()
		if got := exitCode(cmd.ProcessState, err); got != c.want {
			t.Errorf("%s: exit code %d, want %d", c.script, got, c.want)
		}
	}
}
