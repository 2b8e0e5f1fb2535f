package inferenceserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Status
		ok   bool
	}{
		{`{"address": "127.0.0.1:5001", "ferry_inference_server": "ready", "pid": 7, "workers": [8, 9]}`,
			Status{State: StateReady, Address: "127.0.0.1:5001", PID: 7, Workers: []int{8, 9}}, true},
		{`{"address": "[::1]:80", "ferry_inference_server": "listening", "pid": 7}` + "\n",
			Status{State: StateListening, Address: "[::1]:80", PID: 7}, true},
		{`ready`, Status{}, false},
		{`{"ferry_inference_server": "ready"}`, Status{}, false},                                   // no address
		{`{"address": "h:0", "ferry_inference_server": "ready"}`, Status{}, false},                 // no port
		{`{"address": "h:1", "ferry_inference_server": "done"}`, Status{}, false},                  // unknown state
		{`{"address": "h:1", "ferry_inference_server": "ready", "x": 1}`, Status{}, false},         // a field of its own
		{`{"address": "h:1", "ferry_inference_server": "ready"} {"more": 1}`, Status{}, false},     // two values
		{`{"address": "h:1", "ferry_inference_server": "ready", "pid": "seven"}`, Status{}, false}, // wrong type
		{`print {"address": "h:1", "ferry_inference_server": "ready"}`, Status{}, false},           // not at the start
	} {
		got, ok := ParseStatus([]byte(tc.line))
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.line, ok, tc.ok)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.line, diff)
		}
	}
}

// TestWatchAndWaitReady: the script's own lines pass to the log, status
// lines come on the channel, and the end of stdout before ready is
// ErrExited.
func TestWatchAndWaitReady(t *testing.T) {
	out := `{"address": "127.0.0.1:9", "ferry_inference_server": "listening", "pid": 1}
loading model
{"address": "127.0.0.1:9", "ferry_inference_server": "ready", "pid": 1, "workers": [2]}
served`
	var log strings.Builder
	ch := Watch(strings.NewReader(out), &log)
	s, err := WaitReady(context.Background(), ch)
	if err != nil || s.State != StateReady || s.Address != "127.0.0.1:9" {
		t.Fatalf("WaitReady: %+v, %v", s, err)
	}
	for range ch {
	}
	if log.String() != out {
		t.Errorf("log %q, want all of stdout", log.String())
	}

	ch = Watch(strings.NewReader("Traceback\n"), nil)
	if _, err := WaitReady(context.Background(), ch); !errors.Is(err, ErrExited) {
		t.Errorf("WaitReady on an early end: %v, want ErrExited", err)
	}

	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := WaitReady(ctx, Watch(r, nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady with a cancelled context: %v", err)
	}
}

// FuzzParseStatus: any line, from a script's print or a broken pipe, is
// parsed without panicking, and what is accepted has a usable address and
// a known state and says the same when written back.
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte(`{"address": "127.0.0.1:5001", "ferry_inference_server": "ready", "pid": 7, "workers": [8, 9]}`))
	f.Add([]byte(`{"address": "[::1]:80", "ferry_inference_server": "listening", "pid": 7}`))
	f.Add([]byte(`{"ferry_inference_server": "ready", "address": ":1"}`))
	f.Add([]byte("\x00{"))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, ok := ParseStatus(line)
		if !ok {
			if !cmp.Equal(s, Status{}) {
				t.Fatalf("rejected line returned %+v", s)
			}
			return
		}
		if s.State != StateReady && s.State != StateListening {
			t.Fatalf("accepted state %q", s.State)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, ok := ParseStatus(b)
		if !ok || !cmp.Equal(s, again) {
			t.Fatalf("round trip of %+v: %+v, %v", s, again, ok)
		}
	})
}
