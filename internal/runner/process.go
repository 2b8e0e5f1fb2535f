package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/ferry-ml/ferry/internal/environment"
)

// process is a started job command, on the host or in a container. The
// runner's loop treats both alike: wait for the end, or signal it.
type process interface {
	// wait blocks until the command ends and returns its exit code,
	// 128+signal when a signal ended it.
	wait() (int, error)
	// stop sends SIGTERM to the whole job, or SIGKILL when kill is set.
	stop(kill bool)
	// cleanup makes sure nothing the job started is left running.
	cleanup()
}

// hostProcess is a command on this machine, run by a shim (shim.go) in a
// process group of its own, so that the job's whole tree dies with the
// runner.
type hostProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the shim has ended
	err  error         // of cmd.Wait, once done
}

// startHost starts command in dir with env under a shim (shim.go), as
// cred's account when it is not nil.
func startHost(shellPath, command, dir string, env []string, spool *os.File, cred *syscall.Credential) (*hostProcess, error) {
	cmd := exec.Command(shimExe, shimArgs(shellPath, command, cred)...)
	cmd.Dir = dir
	cmd.Env = env
	// One file for both streams, opened O_APPEND: lines land in the order
	// the job wrote them and nothing is lost if this runner dies.
	cmd.Stdout, cmd.Stderr = spool, spool
	return startShim(cmd)
}

// startShim starts cmd, a shim, with the runner's parent-death signal.
func startShim(cmd *exec.Cmd) (*hostProcess, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: shimParentDied}
	p := &hostProcess{cmd: cmd, done: make(chan struct{})}
	// The parent-death signal is sent when the thread that forked the
	// shim ends, not the process: the thread is held until the shim ends.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// warmShim is a shim started before its job is known, that waits on a
// pipe for it (ShimMain, shimStdin). Starting the binary is the largest
// part of a short job's time on the runner's side (bench/dispatch); a warm
// shim starts while the runner fetches its assignment and prepares the
// job, not after. A shim given no job ends when the pipe is closed, and
// one whose runner dies ends with it as any shim does.
type warmShim struct {
	p *hostProcess
	w *os.File // the pipe; closed once the job is written
}

// startWarmShim starts a shim that waits for its job. Its own messages go
// to the runner's stderr until it has the job's spool.
func startWarmShim() (*warmShim, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(shimExe, ShimCommand, strconv.Itoa(os.Getpid()), shimStdin)
	cmd.Stdin = pr
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	p, err := startShim(cmd)
	pr.Close()
	if err != nil {
		pw.Close()
		return nil, err
	}
	return &warmShim{p: p, w: pw}, nil
}

// start gives the shim its job, as startHost would start it; it is called
// once. An error means the shim is gone and nothing was started.
func (s *warmShim) start(shellPath, command, dir string, env []string, spool *os.File, cred *syscall.Credential) (*hostProcess, error) {
	job := shimJob{Args: []string{shellPath, "-c", command}, Dir: dir, Env: env, Log: spool.Name()}
	if cred != nil {
		job.As = fmt.Sprintf("%d:%d", cred.Uid, cred.Gid)
	}
	err := json.NewEncoder(s.w).Encode(job)
	if cerr := s.w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("the waiting shim: %w", err)
	}
	return s.p, nil
}

// close ends a shim that was given no job.
func (s *warmShim) close() { _ = s.w.Close() }

func (p *hostProcess) wait() (int, error) {
	<-p.done
	return exitCode(p.cmd.ProcessState, p.err), nil
}

func (p *hostProcess) stop(kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = shimKill
	}
	_ = p.cmd.Process.Signal(sig)
}

// cleanup makes sure nothing the job started outlives it and holds the
// slot: the shim kills what the job left when the job's shell ends, and
// is told to kill the whole tree if it still runs.
func (p *hostProcess) cleanup() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(shimKill)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// exitCode is the process's exit status, or 128+signal as shells report it.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if ps.ExitCode() >= 0 {
		return ps.ExitCode()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// containerJob is what a job's container is made from.
type containerJob struct {
	Image   string
	Command string
	Dir     string // the attempt's folder, mounted at the same path
	// ReadOnly are more host folders mounted read-only at the same path
	// (the node's mlflow stand-in).
	ReadOnly []string
	WorkDir  string   // the job's working directory, inside Dir
	Spool    string   // the log spool, inside Dir
	Env      []string // the job's variables only: the host's PATH means nothing in the image
	// User is uid:gid the command runs as: the job's account's, or the
	// runner's own, so that the files it writes in Dir are the runner's.
	User   string
	Labels map[string]string
	Opts   environment.ContainerOptions
	// GPUs: the node's CUDA_VISIBLE_DEVICES for this runner ("" = all the
	// node has, when it has any; "none" or "-1" = none), and whether the node
	// has NVIDIA devices at all.
	GPUs    string
	HasGPUs bool
}

// containerConfig turns a job into the engine's container settings. The
// attempt's folder is mounted at the same path, so the paths the command
// was given for inputs, outputs and code are the same inside; the network
// is the host's, so FERRY_API_URL reaches the server as it does for a host
// job. The command writes straight into the O_APPEND spool, as on the host,
// so nothing is lost if the runner dies while the container runs.
func containerConfig(j containerJob) (*container.Config, *container.HostConfig) {
	wrapper := `exec >>"$0" 2>&1; if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec sh -c "$1"`
	cfg := &container.Config{
		Image:      j.Image,
		Cmd:        []string{"/bin/sh", "-c", wrapper, j.Spool, j.Command},
		Env:        j.Env,
		WorkingDir: j.WorkDir,
		User:       j.User,
		Labels:     j.Labels,
	}
	init := true // docker-init forwards SIGTERM to the job; a shell as PID 1 would ignore it
	hc := &container.HostConfig{
		Binds:       binds(j),
		NetworkMode: "host",
		Init:        &init,
		ShmSize:     j.Opts.ShmSize,
		IpcMode:     container.IpcMode(j.Opts.IPC),
	}
	hc.NanoCPUs = j.Opts.NanoCPUs
	hc.Memory = j.Opts.Memory
	if j.Opts.PidsLimit != 0 {
		n := j.Opts.PidsLimit
		hc.PidsLimit = &n
	}
	for name, l := range j.Opts.Ulimits {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: name, Soft: l[0], Hard: l[1]})
	}
	hc.DeviceRequests = gpuRequests(j.GPUs, j.HasGPUs)
	return cfg, hc
}

// binds mounts the attempt's folder, and the read-only folders, each at
// its own path.
func binds(j containerJob) []string {
	b := []string{j.Dir + ":" + j.Dir}
	for _, d := range j.ReadOnly {
		b = append(b, d+":"+d+":ro")
	}
	return b
}

// gpuRequests gives the container the GPUs this runner was given: those
// named in CUDA_VISIBLE_DEVICES, or every GPU of the node when it names
// none, as a job on the host would see them.
func gpuRequests(visible string, hasGPUs bool) []container.DeviceRequest {
	visible = strings.TrimSpace(visible)
	switch {
	case visible == "none" || visible == "-1" || (visible == "" && !hasGPUs):
		return nil
	case visible == "" || visible == "all":
		return []container.DeviceRequest{{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}}}
	}
	var ids []string
	for _, id := range strings.Split(visible, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	return []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: ids, Capabilities: [][]string{{"gpu"}}}}
}

// containerProcess is a job running in a container of the node's engine.
type containerProcess struct {
	api   *client.Client
	id    string
	guard *os.File // the write end of its guard's pipe (guard.go)
}

func startContainer(ctx context.Context, api *client.Client, j containerJob) (*containerProcess, error) {
	cfg, hc := containerConfig(j)
	created, err := api.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("create container from %s: %w", j.Image, err)
	}
	p := &containerProcess{api: api, id: created.ID}
	// The guard is in place before the container starts, so there is no
	// moment when a dying runner would leave a running container behind.
	if p.guard, err = startGuard(created.ID); err != nil {
		p.cleanup()
		return nil, err
	}
	if err := api.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		p.cleanup()
		return nil, fmt.Errorf("start container from %s: %w", j.Image, err)
	}
	return p, nil
}

func (p *containerProcess) wait() (int, error) {
	// The wait outlives any request context: the job may run for days.
	ctx := context.Background()
	for {
		res, errc := p.api.ContainerWait(ctx, p.id, container.WaitConditionNotRunning)
		select {
		case r := <-res:
			return int(r.StatusCode), nil
		case err := <-errc:
			// The engine restarted or the connection dropped: ask again,
			// unless the container is gone.
			if client.IsErrNotFound(err) {
				return -1, fmt.Errorf("container %s disappeared: %w", p.id[:12], err)
			}
			time.Sleep(time.Second)
		}
	}
}

func (p *containerProcess) stop(kill bool) {
	sig := "TERM"
	if kill {
		sig = "KILL"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.api.ContainerKill(ctx, p.id, sig)
}

func (p *containerProcess) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = p.api.ContainerRemove(ctx, p.id, container.RemoveOptions{Force: true})
	if p.guard != nil {
		p.guard.Close() // the guard finds nothing left and ends
	}
}
