package inferenceserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// The server's states, as its status lines on stdout name them.
const (
	StateListening = "listening" // bound; init() runs in the workers
	StateReady     = "ready"     // every worker's init() returned
)

// Status is one status line of a replica's stdout.
type Status struct {
	State   string `json:"ferry_inference_server"`
	Address string `json:"address"` // host:port it listens on
	PID     int    `json:"pid"`     // the parent process
	Workers []int  `json:"workers,omitempty"`
	// Unix is the Unix socket it listens on as well (--unix), with the
	// socket file's device and inode and the boot id of its kernel: what
	// tells a gateway that the socket is reachable from where it runs
	// (OnThisHost).
	Unix    string `json:"unix,omitempty"`
	UnixDev uint64 `json:"unix_dev,omitempty"`
	UnixIno uint64 `json:"unix_ino,omitempty"`
	BootID  string `json:"boot_id,omitempty"`
	// WorkerSockets are the workers' own Unix sockets, one a worker,
	// beside Unix: a gateway on this host that connects there balances
	// across the workers itself and saves the front's hand-over
	// (WorkersOnThisHost).
	WorkerSockets []SocketFile `json:"worker_sockets,omitempty"`
}

// SocketFile is a Unix socket a replica listens on: its path, and the
// socket file's device and inode, by which a gateway tells that the path
// it sees is that very socket.
type SocketFile struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// ErrExited is what WaitReady returns, wrapped, when the replica's stdout
// ends before it is ready: it exited, for example because init() failed
// (its stderr holds the traceback).
var ErrExited = errors.New("inference server exited before it was ready")

// ParseStatus reads one line of a replica's stdout. It reports false for
// any other line: the scoring script prints to stdout too, and a line of
// its own is never taken for a status, unless it is one, field for field.
func ParseStatus(line []byte) (Status, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"ferry_inference_server"`)) {
		return Status{}, false
	}
	var s Status
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || dec.More() {
		return Status{}, false
	}
	if len(s.Workers) == 0 {
		s.Workers = nil // "workers": [] says what no workers does
	}
	if s.State != StateListening && s.State != StateReady {
		return Status{}, false
	}
	host, port, err := net.SplitHostPort(s.Address)
	if err != nil || host == "" {
		return Status{}, false
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return Status{}, false
	}
	return s, true
}

// Watch reads a replica's stdout to its end, copying every line to log
// (nil: discarded) and sending each status line on the channel, which it
// closes at the end. Whoever starts the replica with its stdout on a pipe
// runs it, so that the pipe never fills.
func Watch(stdout io.Reader, log io.Writer) <-chan Status {
	ch := make(chan Status, 2)
	if log == nil {
		log = io.Discard
	}
	go func() {
		defer close(ch)
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				_, _ = log.Write(line)
				if s, ok := ParseStatus(line); ok {
					ch <- s
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// WaitReady waits for the ready status on a channel from Watch. It
// returns an error wrapping ErrExited when the channel closes first, or
// the context's error.
func WaitReady(ctx context.Context, statuses <-chan Status) (Status, error) {
	for {
		select {
		case <-ctx.Done():
			return Status{}, fmt.Errorf("waiting for the inference server to be ready: %w", ctx.Err())
		case s, ok := <-statuses:
			if !ok {
				return Status{}, ErrExited
			}
			if s.State == StateReady {
				return s, nil
			}
		}
	}
}
