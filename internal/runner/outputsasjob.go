package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/tailbuf"
)

// What a job wrote is read with the job's own rights. The runner may be
// root where the job is not; the walk beneath the attempt's folder
// follows no symlink (snapshot.PlanOutputsUnder), and on top of that the
// reading is done by a process of the job's account: a hard link to a file
// only root may read, or a bug in the walk, then reads no more than the
// job itself could. The runner starts its own binary again as
// `ferry runner-outputs`, as root (the binary may be private to root),
// and that process gives up root for the job's uid and gid before it
// touches the folder. It writes the snapshot stream of the folder to its
// stdout and, on descriptor 3, one JSON line of what it planned before the
// stream and one of what it sent after it; the runner passes the stream
// on to the server unread.

// OutputsCommand is the hidden command of the ferry binary that runs
// OutputsMain.
const OutputsCommand = "runner-outputs"

// outputsRequest is what `ferry runner-outputs` reads on its stdin.
type outputsRequest struct {
	UID  uint32                 `json:"uid"`
	GID  uint32                 `json:"gid"`
	Base string                 `json:"base"`
	Rel  string                 `json:"rel"`
	Opt  snapshot.OutputOptions `json:"opt"`
}

// outputsPlanned is the first line on descriptor 3: the plan, or why
// there is none.
type outputsPlanned struct {
	Files       int                `json:"files"`
	Bytes       int64              `json:"bytes"`
	Skipped     []snapshot.Skipped `json:"skipped,omitempty"`
	SkippedMore int                `json:"skipped_more,omitempty"`
	Error       string             `json:"error,omitempty"`
}

// outputsSent is the second line: what the stream held, or why it ended.
type outputsSent struct {
	snapshot.OutputSent
	Error string `json:"error,omitempty"`
}

// OutputsMain is `ferry runner-outputs` (started by the runner, not by
// people): see above. It returns the exit code.
func OutputsMain(stdin io.Reader, stdout io.Writer) int {
	meta := os.NewFile(3, "meta")
	if meta == nil {
		fmt.Fprintln(os.Stderr, "ferry runner-outputs: started without its descriptor 3 (the runner starts it)")
		return 2
	}
	enc := json.NewEncoder(meta)
	var req outputsRequest
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		_ = enc.Encode(outputsPlanned{Error: "the request on stdin: " + err.Error()})
		return 2
	}
	if err := dropTo(req.UID, req.GID); err != nil {
		_ = enc.Encode(outputsPlanned{Error: err.Error()})
		return 2
	}
	plan, err := snapshot.PlanOutputsUnder(req.Base, req.Rel, req.Opt)
	if err != nil {
		_ = enc.Encode(outputsPlanned{Error: err.Error()})
		return 1
	}
	if err := enc.Encode(outputsPlanned{Files: plan.Len(), Bytes: plan.TotalSize(), Skipped: plan.Skipped, SkippedMore: plan.SkippedMore}); err != nil {
		return 1
	}
	w := bufio.NewWriterSize(stdout, 256<<10)
	sent, err := plan.WriteStream(w, nil)
	if err == nil {
		err = w.Flush()
	}
	out := outputsSent{OutputSent: sent}
	if err != nil {
		out.Error = err.Error()
	}
	_ = enc.Encode(out)
	if err != nil {
		return 1
	}
	return 0
}

// dropTo makes the process uid:gid with no supplementary groups, for good
// (Go changes every thread's credentials), and checks that root cannot be
// had back.
func dropTo(uid, gid uint32) error {
	if uid == 0 {
		return errors.New("ferry runner-outputs: will not read a job's outputs as root")
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("ferry runner-outputs: setgroups: %w", err)
	}
	if err := syscall.Setgid(int(gid)); err != nil {
		return fmt.Errorf("ferry runner-outputs: setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(int(uid)); err != nil {
		return fmt.Errorf("ferry runner-outputs: setuid %d: %w", uid, err)
	}
	if syscall.Setuid(0) == nil || os.Geteuid() != int(uid) {
		return fmt.Errorf("ferry runner-outputs: still able to become root after setuid %d", uid)
	}
	return nil
}

// jobOutputs is an output folder read by a process of the job's account;
// it is a client.OutputSource. The first reader is started at once, for
// the plan the runner needs before it uploads (its size counts against the
// job's quota); each further WriteStream (a retry) starts another, which
// plans the folder again.
type jobOutputs struct {
	req     outputsRequest
	display string
	planned outputsPlanned
	pending *outputsReader // started, its plan read, its stream not yet
}

// outputsReader is a started `ferry runner-outputs`.
type outputsReader struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	meta   *bufio.Reader
	metaR  *os.File
	stderr *tailbuf.Buffer
}

// readOutputsAs plans the folder rel beneath the attempt's folder base as
// the account cred names.
func readOutputsAs(cred *syscall.Credential, base, rel, display string, opt snapshot.OutputOptions) (*jobOutputs, error) {
	j := &jobOutputs{req: outputsRequest{UID: cred.Uid, GID: cred.Gid, Base: base, Rel: rel, Opt: opt}, display: display}
	r, planned, err := j.start()
	if err != nil {
		return nil, err
	}
	j.planned, j.pending = planned, r
	return j, nil
}

// start starts a reader and reads its plan.
func (j *jobOutputs) start() (*outputsReader, outputsPlanned, error) {
	var planned outputsPlanned
	req, err := json.Marshal(j.req)
	if err != nil {
		return nil, planned, err
	}
	metaR, metaW, err := os.Pipe()
	if err != nil {
		return nil, planned, err
	}
	defer metaW.Close()
	cmd := exec.Command(shimExe, OutputsCommand)
	cmd.Stdin = strings.NewReader(string(req))
	cmd.ExtraFiles = []*os.File{metaW}
	stderr := tailbuf.New(4 << 10)
	cmd.Stderr = stderr
	// It reads for this runner alone: it goes when the runner does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		metaR.Close()
		return nil, planned, err
	}
	if err := cmd.Start(); err != nil {
		metaR.Close()
		return nil, planned, fmt.Errorf("reading %s as the job's account: %w", j.display, err)
	}
	r := &outputsReader{cmd: cmd, stdout: stdout, meta: bufio.NewReader(metaR), metaR: metaR, stderr: stderr}
	if err := r.line(&planned); err != nil || planned.Error != "" {
		r.close()
		if err == nil {
			err = errors.New(planned.Error)
		}
		return nil, planned, fmt.Errorf("snapshot %s (read as the job's account): %w", j.display, err)
	}
	return r, planned, nil
}

// line reads one JSON line of descriptor 3 into v.
func (r *outputsReader) line(v any) error {
	b, err := r.meta.ReadBytes('\n')
	if err != nil {
		r.close() // its stderr is complete once it is waited for
		if msg := strings.TrimSpace(r.stderr.String()); msg != "" {
			return fmt.Errorf("the reader ended: %s", msg)
		}
		return fmt.Errorf("the reader ended without a word: %w", err)
	}
	return json.Unmarshal(b, v)
}

// close stops the reader, if it still runs, and waits for it; it may be
// called again.
func (r *outputsReader) close() {
	r.stdout.Close()
	r.metaR.Close()
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// Len is how many files the plan sends.
func (j *jobOutputs) Len() int { return j.planned.Files }

// TotalSize is the bytes the plan sends at most.
func (j *jobOutputs) TotalSize() int64 { return j.planned.Bytes }

// skipped is what the plan left out.
func (j *jobOutputs) skipped() ([]snapshot.Skipped, int) {
	return j.planned.Skipped, j.planned.SkippedMore
}

// WriteStream passes a reader's stream on to w and returns what it sent.
func (j *jobOutputs) WriteStream(w io.Writer, _ func(int64)) (snapshot.OutputSent, error) {
	r := j.pending
	j.pending = nil
	if r == nil {
		var err error
		if r, _, err = j.start(); err != nil {
			return snapshot.OutputSent{}, err
		}
	}
	defer r.close()
	if _, err := io.Copy(w, r.stdout); err != nil {
		return snapshot.OutputSent{}, err
	}
	var sent outputsSent
	if err := r.line(&sent); err != nil {
		return snapshot.OutputSent{}, fmt.Errorf("snapshot %s (read as the job's account): %w", j.display, err)
	}
	if sent.Error != "" {
		return sent.OutputSent, fmt.Errorf("snapshot %s (read as the job's account): %s", j.display, sent.Error)
	}
	if err := r.cmd.Wait(); err != nil {
		return sent.OutputSent, fmt.Errorf("snapshot %s (read as the job's account): %w", j.display, err)
	}
	return sent.OutputSent, nil
}

// Build is the upload to a server older than the snapshot stream, which
// needs the files hashed here and read again by path: a root runner does
// not do that on a job's folder.
func (j *jobOutputs) Build() (*snapshot.OutputBuild, error) {
	return nil, fmt.Errorf("snapshot %s: the server does not take output streams (it is older than this runner), and a job's outputs are read only as a stream of its own account; upgrade the server", j.display)
}

// Close stops a reader that was started and not used.
func (j *jobOutputs) Close() {
	if j.pending != nil {
		j.pending.close()
		j.pending = nil
	}
}
