package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/server"
)

// `ferry server stop --all` ends what a server started on this machine as
// well as the server: the local executor and its guard, runners and their
// shims, the agents of process-provider nodes (instances, clusters,
// endpoints' replicas on them). A plain stop leaves those running on
// purpose, so that a restart loses no work; an operator who means to stop
// everything has no other way to find them. They are found as the
// processes run from a ferry binary the server installed: in its data dir
// (bin/) or its work dir (process nodes' copies), which no other
// workspace's processes run from.

// sharedWorkRoot is where a server keeps its work dir when the job account
// cannot pass through the way to DATA_DIR-work (internal/server,
// isolation.go: defaultWorkDir).
const sharedWorkRoot = "/var/lib/ferry-work"

// workDirsOf is where the processes of the server of dir run from: its
// data dir, and its work dir as server.json gives it (read before the
// server ends and removes it) or, when no server runs, the default work
// dirs of dir that exist.
func workDirsOf(dir, recorded string) []string {
	dirs := []string{dir}
	if recorded != "" {
		return append(dirs, recorded)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	for _, d := range []string{filepath.Clean(dir) + "-work", filepath.Join(sharedWorkRoot, hex.EncodeToString(sum[:6]))} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// startedProc is a live process run from a binary under one of a
// server's folders.
type startedProc struct {
	pid  int
	args []string
}

// selfEnding says whether the process ends by itself once the process it
// watches has: a runner's shim ends its job's tree when its runner is
// gone, the executor's guard when the executor is.
func (p startedProc) selfEnding() bool {
	if len(p.args) < 2 {
		return false
	}
	switch p.args[1] {
	case "runner-shim", "runner-guard":
		return true
	case "local-executor":
		return len(p.args) < 3 || p.args[2] != "--serve"
	}
	return false
}

// procsUnder lists the live processes whose executable is under one of
// dirs, other than this one.
func procsUnder(dirs []string) []startedProc {
	var out []startedProc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !processAlive(pid) {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		for _, d := range dirs {
			if strings.HasPrefix(exe, d+"/") {
				raw, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				out = append(out, startedProc{pid: pid, args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")})
				break
			}
		}
	}
	return out
}

// stopAll stops the server of dir, then everything run from its folders:
// SIGTERM to each (a runner then stops its job as a cancel does, the
// executor every attempt it runs), SIGKILL to what is left after timeout.
func (a *app) stopAll(ctx context.Context, dir string, timeout time.Duration) error {
	var info server.Info
	if data, err := os.ReadFile(filepath.Join(dir, server.InfoFile)); err == nil {
		_ = json.Unmarshal(data, &info)
	}
	if err := a.stopServer(ctx, dir, timeout, true); err != nil {
		return err
	}
	dirs := workDirsOf(dir, info.WorkDir)
	procs := procsUnder(dirs)
	if len(procs) == 0 {
		fmt.Fprintf(a.stderr, "nothing the server started runs any more\n")
		return nil
	}
	signaled := 0
	for _, p := range procs {
		if !p.selfEnding() && syscall.Kill(p.pid, syscall.SIGTERM) == nil {
			signaled++
		}
	}
	fmt.Fprintf(a.stderr, "stopping %d processes the server started (runners, the local executor, agents of nodes); runners stop their jobs as a cancel does...\n", signaled)
	// SIGTERM, then SIGKILL past the timeout to all but the shims and the
	// executor's guard, which end their jobs' trees once what they watch
	// is gone; then SIGKILL to whatever is left.
	killed := 0
	for deadline := time.Now().Add(timeout); ; {
		left := procsUnder(dirs)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if killed == 2 {
				var what []string
				for _, p := range left {
					what = append(what, fmt.Sprintf("%d (%s)", p.pid, strings.Join(p.args, " ")))
				}
				return fmt.Errorf("these processes the server started still run after SIGKILL: %s", strings.Join(what, "; "))
			}
			for _, p := range left {
				if killed == 1 || !p.selfEnding() {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
			killed++
			deadline = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	how := "they ended"
	if killed > 0 {
		how = fmt.Sprintf("those still running after %s were killed", timeout)
	}
	fmt.Fprintf(a.stderr, "stopped everything the server started (%s)); the next server started shows what became of their jobs\n", how)
	return nil
}
