package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// fakeContainerRunnerCommand makes the test binary a runner that starts
// one container job, says which on stdout, and waits to be killed.
const fakeContainerRunnerCommand = "fake-container-runner"

func fakeContainerRunner(args []string) int {
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Println(err)
		return 1
	}
	dir := args[0]
	p, err := startContainer(context.Background(), api, containerJob{
		Image: testutil.BaseImage, Command: "sleep 1000", Dir: dir, WorkDir: dir, Spool: filepath.Join(dir, "std.log"),
		Labels: map[string]string{"ferry.test": "guard"},
	})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("started", p.id)
	select {}
}

// A container job dies with its runner: when the runner is killed with
// SIGKILL, its guard removes the container, which would otherwise run on,
// holding the node's slot and GPUs.
func TestRunnerKill9RemovesItsContainer(t *testing.T) {
	testutil.RequireBaseImage(t)
	api := testutil.RequireDocker(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], fakeContainerRunnerCommand, dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "started ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the fake runner did not start its container: %q", line)
	}
	t.Cleanup(func() {
		_ = api.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	})
	running := func() (bool, bool) {
		c, err := api.ContainerInspect(context.Background(), id)
		if client.IsErrNotFound(err) {
			return false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true, c.State.Running
	}
	if exists, run := running(); !exists || !run {
		t.Fatalf("container %s: exists %v, running %v before the runner is killed", id[:12], exists, run)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(guard)
	for {
		if exists, _ := running(); !exists {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still exists %s after its runner was killed", id[:12], guard)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
