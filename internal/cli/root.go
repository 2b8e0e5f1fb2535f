// Package cli is Ferry's command line: the workspace server, the runner and
// the user commands, which talk to a workspace only through its REST API.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/executor"
	"github.com/ferry-ml/ferry/internal/runner"
	"github.com/ferry-ml/ferry/internal/selfexe"
	"github.com/ferry-ml/ferry/internal/server"
)

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

// app is the state shared by all commands.
type app struct {
	stdout, stderr io.Writer
	output         string // -o
	getenv         func(string) string
	// terminal says whether w is a terminal, where progress is drawn.
	terminal func(w io.Writer) bool
	// self is how the user runs this ferry again, for the commands that
	// messages suggest (selfCommand).
	self string
}

// Run runs the ferry command line and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return newApp(stdout, stderr, os.Getenv).run(ctx, args)
}

// newApp is the CLI of the running process, reading its environment with
// getenv.
func newApp(stdout, stderr io.Writer, getenv func(string) string) *app {
	exe, _ := os.Executable()
	argv0 := "ferry"
	if len(os.Args) > 0 {
		argv0 = os.Args[0]
	}
	return &app{stdout: stdout, stderr: stderr, getenv: getenv, terminal: isTerminal,
		self: selfCommand(exe, argv0, os.TempDir(), goCache(getenv))}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (a *app) run(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == runner.ShimCommand {
		// The supervisor of a host job (runner.ShimMain): its arguments
		// are the job's command line, which no flag parser may touch.
		return runner.ShimMain(args[1:])
	}
	if len(args) > 0 && args[0] == runner.OutputsCommand {
		// A job's outputs read as its account (runner.OutputsMain).
		return runner.OutputsMain(os.Stdin, os.Stdout)
	}
	if len(args) > 0 && args[0] == runner.ExecutorCommand {
		// The local executor (internal/executor), under its guard.
		if len(args) > 1 && args[1] == runner.ExecutorServe {
			return executor.Main(args[2:])
		}
		return runner.ExecutorGuardMain(args[1:])
	}
	if len(args) > 0 && args[0] == runner.GuardCommand {
		// Removes a container job when its runner dies (runner.GuardMain).
		return runner.GuardMain(args[1:], os.Stdin)
	}
	stdout, stderr := a.stdout, a.stderr
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "error:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Ferry runs the same ML training job on any compute target",
		Long: `Ferry is a self-hosted compute layer for machine learning: define compute
targets, submit Azure ML v2 job files to any of them, stream logs, keep
outputs and metrics.

The CLI talks to the workspace at $FERRY_URL with $FERRY_TOKEN. Without
$FERRY_URL it uses the local workspace in $FERRY_HOME (default ~/.ferry),
starting its server in the background when none is running.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.SetVersionTemplate("ferry {{.Version}}\n")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	root.AddCommand(a.serverCmd(), a.runnerCmd(), a.copySelfCmd(), a.quickstartCmd(), a.jobCmd(), a.computeCmd(), environments.cmd(a), a.sizeCmd(), a.quotaCmd(), a.agentCmd(), a.probeCmd(), a.versionCmd())
	root.AddCommand(models.cmd(a), dataAssets.cmd(a))
	root.AddCommand(components.cmd(a), a.datastoreCmd(), a.scheduleCmd())
	root.AddCommand(onlineEndpoints.cmd(a), a.onlineDeploymentCmd())
	root.AddCommand(batchEndpoints.cmd(a), a.batchDeploymentCmd())
	a.addCompletions(root)
	return root
}

func (a *app) checkOutput() error {
	switch a.output {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output: %q is not one of table, json, yaml", a.output)
}

// print writes v as JSON or YAML, or calls table for the table form.
func (a *app) print(v any, table func(w *tabwriter.Writer)) error {
	if err := a.checkOutput(); err != nil {
		return err
	}
	switch a.output {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		// Through JSON, so YAML shows the same field names as JSON.
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var generic any
		if err := json.Unmarshal(data, &generic); err != nil {
			return err
		}
		return yaml.NewEncoder(a.stdout).Encode(generic)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// home is the local workspace's directory.
func (a *app) home() (string, error) {
	if h := a.getenv("FERRY_HOME"); h != "" {
		return filepath.Abs(h)
	}
	uh, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory; set FERRY_HOME: %w", err)
	}
	return filepath.Join(uh, ".ferry"), nil
}

// connect returns a client of the workspace the user means.
func (a *app) connect(ctx context.Context) (*client.Client, error) {
	if u := a.getenv("FERRY_URL"); u != "" {
		tok := a.getenv("FERRY_TOKEN")
		if tok == "" {
			return nil, errors.New("FERRY_URL is set but FERRY_TOKEN is not; set it to your API token (a server's owner token is in its data dir, owner.token)")
		}
		return client.New(u, tok), nil
	}
	home, err := a.home()
	if err != nil {
		return nil, err
	}
	url, err := a.ensureLocalServer(ctx, home)
	if err != nil {
		return nil, err
	}
	tok := a.getenv("FERRY_TOKEN")
	if tok == "" {
		data, err := os.ReadFile(filepath.Join(home, server.TokenFile))
		if err != nil {
			return nil, fmt.Errorf("read the local workspace's owner token: %w", err)
		}
		tok = string(data)
	}
	return client.New(url, tok), nil
}

// liveServer returns the URL of the server recorded in home if it answers.
func liveServer(ctx context.Context, home string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(home, server.InfoFile))
	if err != nil {
		return "", false
	}
	var info server.Info
	if json.Unmarshal(data, &info) != nil || info.URL == "" {
		return "", false
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if client.New(info.URL, "").Health(hctx) != nil {
		return "", false
	}
	return info.URL, true
}

// ensureLocalServer returns the URL of the local workspace in home,
// starting its server in the background if none answers: always at the
// address recorded in home (localAddrFile), so that what an earlier
// server started finds this one.
func (a *app) ensureLocalServer(ctx context.Context, home string) (string, error) {
	if url, ok := liveServer(ctx, home); ok {
		return url, nil
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", err
	}
	// One starter at a time: two CLIs started together get one server.
	lock, err := os.OpenFile(filepath.Join(home, "start.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if url, ok := liveServer(ctx, home); ok {
		return url, nil
	}
	addr, err := localAddr(home)
	if err != nil {
		return "", err
	}
	if addrTaken(addr) {
		return "", a.addrTakenError(home, addr)
	}
	exe, err := selfexe.Install(filepath.Join(home, "bin"))
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(home, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "server", "--data-dir", home, "--addr", addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start the local workspace server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(30 * time.Second)
	for {
		if url, ok := liveServer(ctx, home); ok {
			fmt.Fprintf(a.stderr, "started the local Ferry workspace at %s (data and log in %s); it runs in the background until `%s server stop`\n", url, home, a.self)
			return url, nil
		}
		select {
		case <-exited:
			if addrTaken(addr) { // taken between the check and the server's start
				return "", a.addrTakenError(home, addr)
			}
			return "", fmt.Errorf("the local workspace server exited at start; see %s", logPath)
		case <-deadline:
			return "", fmt.Errorf("the local workspace server did not answer within 30s; see %s", logPath)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func fmtDuration(start, end *time.Time) string {
	if start == nil {
		return "-"
	}
	e := time.Now()
	if end != nil {
		e = *end
	}
	return e.Sub(*start).Round(time.Millisecond * 100).String()
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
