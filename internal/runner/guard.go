package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// A container job is not a child of its runner, so the shim (shim.go)
// cannot take it down when the runner dies. Each container gets a guard
// instead: `ferry runner-guard CONTAINER-ID`, started in a session of its
// own with a pipe on its stdin whose write end only the runner holds. When
// the runner ends, in any way, SIGKILL included, the kernel closes that
// end; the guard reads EOF and removes the container. A runner that ends
// normally has removed the container already, and the guard finds nothing
// to do.

// GuardCommand is the hidden command of the ferry binary that runs GuardMain.
const GuardCommand = "runner-guard"

// guardExe is the binary the guard is started from: the runner's own.
var guardExe = "/proc/self/exe"

// startGuard starts the guard of a container and returns the write end of
// its pipe, which the runner keeps open while the container lives.
func startGuard(id string) (*os.File, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(guardExe, GuardCommand, id)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // signals to the runner's group do not reach it
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the guard of container %s: %w", id[:min(12, len(id))], err)
	}
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// GuardMain is `ferry runner-guard CONTAINER-ID`: it waits for EOF on
// stdin, then removes the container, and returns the exit code.
func GuardMain(args []string, stdin io.Reader) int {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(os.Stderr, "ferry runner-guard: usage: runner-guard CONTAINER-ID (started by the runner, not by people)")
		return 2
	}
	_, _ = io.Copy(io.Discard, stdin)
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry runner-guard: %v\n", err)
		return 1
	}
	defer api.Close()
	// The engine may be restarting; try for a while before giving up.
	for try := 0; try < 30; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = api.ContainerRemove(ctx, args[0], container.RemoveOptions{Force: true})
		cancel()
		if err == nil || client.IsErrNotFound(err) {
			return 0
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintf(os.Stderr, "ferry runner-guard: could not remove container %s: %v\n", args[0], err)
	return 1
}
