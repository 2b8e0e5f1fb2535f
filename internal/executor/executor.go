// Package executor is the local executor: `ferry local-executor --serve`,
// a long-lived process that runs the local target's attempts with the
// runner library, one goroutine each, instead of one `ferry runner`
// process per attempt (internal/compute/local, executor.go). It is the only
// child of its guard (runner.ExecutorGuardMain), which kills every job
// tree the executor started when the executor dies.
//
// It takes attempts on a unix socket in its folder (0700, the server's
// user's), one JSON line a request, as many as a connection sends. It
// ends when it has no attempt and: its server is gone, it has been idle
// for Idle, its folder or binary is gone, it was asked for by another ID
// (a new binary: it drains), or it was told to stop (SIGTERM: every
// attempt is stopped as a runner told to stop stops its job).
package executor

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/compute/local"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/runner"
)

// DefaultIdle is how long an executor with no attempt waits for one.
const DefaultIdle = 30 * time.Second

// executor is the state of a running executor.
type executor struct {
	id    string
	dir   string
	guard int
	log   *slog.Logger

	mu        sync.Mutex
	attempts  map[string]chan struct{} // JOB/ATTEMPT -> its Cancel
	serverPID int
	last      time.Time // when the last attempt ended or was taken
	draining  bool
	ln        net.Listener
	sockIno   uint64            // of the socket it listens on, so it removes only its own
	metrics   runner.MetricsHub // the attempts' metrics endpoints, one listener
	wg        sync.WaitGroup
}

// Main is `ferry local-executor --serve --dir DIR --id ID [--run-as USER]
// [--idle DURATION]`; it returns the exit code.
func Main(args []string) int {
	fs := flag.NewFlagSet("local-executor", flag.ContinueOnError)
	dir := fs.String("dir", "", "the executor's folder (its socket and log)")
	id := fs.String("id", "", "what the local target knows this executor by")
	runAs := fs.String("run-as", "", "account jobs run as")
	idle := fs.Duration("idle", DefaultIdle, "end after this long without an attempt")
	if err := fs.Parse(args); err != nil || *dir == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "ferry local-executor: usage: local-executor --dir DIR --id ID [--run-as USER] (started by the local target, not by people)")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*dir, *id, *runAs, *idle, log); err != nil {
		log.Error("local executor", "err", err)
		return 1
	}
	return 0
}

func run(dir, id, runAs string, idle time.Duration, log *slog.Logger) error {
	signal.Ignore(syscall.SIGHUP)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	if runAs != "" {
		u, err := isolation.Lookup(runAs)
		if err != nil {
			return fmt.Errorf("--run-as: %w", err)
		}
		// As the runner command: the jobs' PATH holds only what the
		// account can reach. Set once; every attempt here runs as it.
		os.Setenv("PATH", isolation.ReachablePath(os.Getenv("PATH"), u))
	}
	// The socket's path is relative to the folder: the absolute one may be
	// longer than a unix socket's path may be.
	if err := os.Chdir(dir); err != nil {
		return err
	}
	ln, err := listen()
	if err != nil {
		return err
	}
	if ln == nil {
		log.Info("another executor answers on the socket; ending")
		return nil
	}
	e := &executor{id: id, dir: dir, guard: os.Getppid(), log: log, attempts: map[string]chan struct{}{},
		last: time.Now(), ln: ln}
	if fi, err := os.Stat(local.ExecutorSocket); err == nil {
		e.sockIno = fi.Sys().(*syscall.Stat_t).Ino
	}
	defer e.metrics.Close()
	log.Info("local executor started", "pid", os.Getpid(), "guard", e.guard)
	go e.accept()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			log.Info("told to stop: stopping every attempt", "signal", s.String())
			e.stopAll()
			e.wg.Wait()
			return nil
		case <-tick.C:
			if why := e.done(idle); why != "" {
				log.Info("local executor ends", "why", why)
				e.drain()
				e.wg.Wait()
				return nil
			}
		}
	}
}

// listen listens on the socket, replacing a stale one; it returns nil
// when another executor answers on it.
func listen() (net.Listener, error) {
	ln, err := net.Listen("unix", local.ExecutorSocket)
	if err == nil {
		return ln, nil
	}
	if c, derr := net.DialTimeout("unix", local.ExecutorSocket, time.Second); derr == nil {
		c.Close()
		return nil, nil
	}
	if rerr := os.Remove(local.ExecutorSocket); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return nil, fmt.Errorf("listen on %s: %w", local.ExecutorSocket, err)
	}
	return net.Listen("unix", local.ExecutorSocket)
}

// done says why the executor should end now, or "".
func (e *executor) done(idle time.Duration) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.attempts) > 0 {
		return ""
	}
	switch {
	case e.draining:
		return "drained: another executor takes the new attempts"
	case time.Since(e.last) > idle:
		return "idle"
	case e.serverPID > 0 && syscall.Kill(e.serverPID, 0) == syscall.ESRCH:
		return "its server has ended"
	}
	if _, err := os.Stat(e.dir); err != nil {
		return "its folder is gone"
	}
	if _, err := os.Stat(local.ExecutorSocket); err != nil {
		return "its socket is gone"
	}
	return ""
}

// drain takes no new attempt: it stops listening and removes the socket
// if it is still its own, so that a new executor can listen there.
func (e *executor) drain() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return
	}
	e.draining = true
	if fi, err := os.Stat(local.ExecutorSocket); err == nil && fi.Sys().(*syscall.Stat_t).Ino == e.sockIno {
		_ = os.Remove(local.ExecutorSocket)
	}
	if ul, ok := e.ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	_ = e.ln.Close()
}

// stopAll drains and stops every attempt, as SIGTERM stops a runner.
func (e *executor) stopAll() {
	e.drain()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, c := range e.attempts {
		close(c)
		e.attempts[k] = nil
	}
}

func (e *executor) accept() {
	for {
		conn, err := e.ln.Accept()
		if err != nil {
			return
		}
		go e.serve(conn)
	}
}

// serve answers the requests of one connection, one JSON line each, until
// the sender closes it or sends nothing for Idle: the local target keeps
// its connection open from one launch to the next.
func (e *executor) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(io.LimitReader(conn, 1<<30))
	for {
		_ = conn.SetDeadline(time.Now().Add(DefaultIdle))
		line, err := readLine(r, 1<<20)
		if err != nil {
			if len(line) > 0 {
				_ = json.NewEncoder(conn).Encode(local.ExecutorReply{Error: "the request is not one: " + err.Error()})
			}
			return
		}
		var req local.ExecutorRequest
		var rep local.ExecutorReply
		if err := json.Unmarshal(line, &req); err != nil {
			rep.Error = "the request is not one: " + err.Error()
		} else {
			rep = e.take(req)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if err := json.NewEncoder(conn).Encode(rep); err != nil {
			return
		}
	}
}

// readLine reads one line of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > max {
			return line, errors.New("a request of over 1 MiB")
		}
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// take starts an attempt, or says why not.
func (e *executor) take(req local.ExecutorRequest) local.ExecutorReply {
	if req.ID != e.id {
		e.log.Info("asked for by another executor's ID: draining", "want", req.ID)
		e.drain()
		return local.ExecutorReply{Other: true}
	}
	inv := req.Run
	if inv.Job == "" || inv.Dir == "" || req.RunToken == "" {
		return local.ExecutorReply{Error: "run.job, run.dir and run_token are required"}
	}
	key := inv.Job + "/" + strconv.Itoa(inv.Attempt)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return local.ExecutorReply{Other: true}
	}
	if _, ok := e.attempts[key]; ok {
		return local.ExecutorReply{OK: true} // already running: a retried launch
	}
	logf := &lazyLog{path: filepath.Join(inv.Dir, "runner.log")}
	cfg, err := runner.ConfigFor(inv, req.RunToken, slog.New(slog.NewTextHandler(logf, nil)))
	if err != nil {
		logf.Close()
		return local.ExecutorReply{Error: err.Error()}
	}
	if len(req.Assignment) > 0 {
		a := &apitypes.Assignment{}
		if err := json.Unmarshal(req.Assignment, a); err != nil {
			logf.Close()
			return local.ExecutorReply{Error: "assignment: " + err.Error()}
		}
		cfg.Assignment = a
	}
	cancel := make(chan struct{})
	cfg.Cancel = cancel
	cfg.Direct = &runner.Direct{Guard: e.guard, Metrics: &e.metrics}
	e.attempts[key] = cancel
	if req.ServerPID > 0 {
		e.serverPID = req.ServerPID
	}
	e.last = time.Now()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer logf.Close()
		// The attempt's folder and its job's, with their modes: made here,
		// not by the server's launch (internal/compute/local, dirs.go).
		// Should it fail, the runner's own making of the folder fails
		// too, and its final report says why.
		if err := local.MakeAttemptDir(inv.Dir, inv.RunAs); err != nil {
			cfg.Log.Error("making the attempt's folder", "err", err)
		}
		if err := runner.Run(context.Background(), cfg); err != nil {
			cfg.Log.Error("the runner ended", "err", err)
		}
		e.mu.Lock()
		delete(e.attempts, key)
		e.last = time.Now()
		e.mu.Unlock()
	}()
	return local.ExecutorReply{OK: true}
}

// lazyLog is an attempt's runner.log, made when the runner first logs: a
// runner logs nothing in most attempts, and each file made per attempt in
// the runs dir was a share of a small job's CPU (bench/dispatch). A log
// that cannot be made loses the runner's lines, not the attempt: how it
// ended still reaches the server or its folder.
type lazyLog struct {
	path string

	mu  sync.Mutex
	f   *os.File
	err error // of making it, once tried
}

func (l *lazyLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && l.err == nil {
		l.f, l.err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.f.Write(p)
}

// Close closes the log if it was made.
func (l *lazyLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}
