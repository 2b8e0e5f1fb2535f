package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// Every test ends what it started. After the whole package has run, the
// suite fails when a ferry process (server, agent, runner, shim) that the
// tests started is still alive, or a node container the tests made still
// exists, naming them; then it removes them, so that one leak does not
// spoil the next run.

// leftovers are what the e2e tests left behind.
type leftovers struct {
	procs      []string // "PID ARGS"
	containers []string // names
}

func (l leftovers) empty() bool { return len(l.procs) == 0 && len(l.containers) == 0 }

// findLeftovers lists the ferry processes run from a binary the tests
// built or copied (ferryBin, and the copies servers install in their data
// directories, all under runRoot), and the node containers made since
// start from a binary under runRoot.
func findLeftovers(start time.Time) leftovers {
	var l leftovers
	for _, p := range testutil.Procs() {
		if strings.HasPrefix(p.Exe, runRoot+"/") && strings.HasPrefix(filepath.Base(p.Exe), "ferry") {
			l.procs = append(l.procs, strconv.Itoa(p.PID)+" "+p.CmdLine())
		}
	}
	if api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err == nil {
		defer api.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "ferry-node-"))})
		if err == nil {
			for _, c := range cs {
				if time.Unix(c.Created, 0).After(start.Add(-time.Second)) && len(c.Names) > 0 && mountsUnder(c, runRoot) {
					l.containers = append(l.containers, strings.TrimPrefix(c.Names[0], "/"))
				}
			}
		}
	}
	return l
}

// mountsUnder tells whether a node container bind-mounts something from
// dir: a node of a server this run started mounts the server's ferry
// binary from under runRoot, while one made by another run of the suite on
// the same machine (a second checkout, a developer's own server) does not,
// and is not this run's to report or remove.
func mountsUnder(c container.Summary, dir string) bool {
	for _, m := range c.Mounts {
		if strings.HasPrefix(m.Source, dir+"/") {
			return true
		}
	}
	return false
}

// checkLeftovers waits a little for what is still shutting down, then
// reports and removes what is left; it returns false when something was.
func checkLeftovers(start time.Time) bool {
	var l leftovers
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if l = findLeftovers(start); l.empty() || time.Now().After(deadline) {
			break
		}
	}
	if l.empty() {
		return true
	}
	fmt.Fprintln(os.Stderr, "e2e: tests left these behind (each test must end what it started):")
	for _, p := range l.procs {
		fmt.Fprintln(os.Stderr, "  process", p)
		if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err == nil {
		defer api.Close()
		for _, c := range l.containers {
			fmt.Fprintln(os.Stderr, "  container", c)
			_ = api.ContainerRemove(context.Background(), c, container.RemoveOptions{Force: true})
		}
	}
	return false
}

// end stops the server and ends everything it started: the agents and
// runners of its process nodes (their shims then end their jobs' trees)
// and the containers of its docker nodes. A server that stops leaves them
// running on purpose, as it must to ride out a restart; a test that is
// over must not.
func (s *server) end() {
	var nodes []string
	if s.cmd != nil && s.cmd.ProcessState == nil {
		nodes = s.nodeNames()
	}
	s.stop()
	dirs := []string{s.dir}
	if s.work != "" {
		dirs = append(dirs, s.work)
	}
	killRunnersUnder(s.t, dirs)
	if len(nodes) == 0 {
		return
	}
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		list, _ := api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "ferry.node="+n))})
		for _, c := range list {
			_ = api.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
}

// nodeNames lists the nodes of every compute of the server.
func (s *server) nodeNames() []string {
	code, body := s.call("GET", "/v1/computes", s.token, nil)
	var cs []struct {
		Name string `json:"name"`
	}
	if code != 200 || json.Unmarshal(body, &cs) != nil {
		return nil
	}
	var names []string
	for _, c := range cs {
		code, body := s.call("GET", "/v1/computes/"+c.Name+"/nodes", s.token, nil)
		var ns []struct {
			Name string `json:"name"`
		}
		if code == 200 && json.Unmarshal(body, &ns) == nil {
			for _, n := range ns {
				names = append(names, n.Name)
			}
		}
	}
	return names
}

// killRunnersUnder kills the ferry processes run from a binary under
// dirs (a server's copies: agents, runners), except shims, which end
// their jobs' trees when their runner dies, and waits until none is left.
func killRunnersUnder(t *testing.T, dirs []string) {
	t.Helper()
	under := func(exe string) bool {
		for _, d := range dirs {
			if strings.HasPrefix(exe, d+"/") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := 0
		for _, p := range testutil.Procs() {
			if !under(p.Exe) {
				continue
			}
			left++
			if len(p.Args) > 1 && (p.Args[1] == "runner-shim" || p.Args[1] == "runner-guard") {
				continue // ends by itself once its runner is gone
			}
			if len(p.Args) > 2 && p.Args[1] == "local-executor" && p.Args[2] != "--serve" {
				continue // the executor's guard: kills its jobs and ends once the executor is gone
			}
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d processes of the server's nodes outlived it by 30 s", left)
			return
		}
	}
}
