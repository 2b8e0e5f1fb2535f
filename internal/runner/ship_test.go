package runner

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
)

// Lines written while a chunk of the log is being sent wait for the next
// send after the shipper's pause, as lines written while it was idle
// would, instead of going at once in a call of their own: a serving
// replica logs every request, and a call per few requests cost the server
// more CPU than routing them. A chunk that fills the buffer (the shipper
// is behind) is still followed at once.
func TestShipBatchesLinesWrittenDuringASend(t *testing.T) {
	spool := filepath.Join(t.TempDir(), "spool")
	f, err := os.Create(spool)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	chunks := make(chan string)
	release := make(chan struct{})
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		off, _ := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
		select {
		case chunks <- string(body):
		case <-done:
			return
		}
		select {
		case <-release:
		case <-done:
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"size": ` + strconv.FormatInt(off+int64(len(body)), 10) + `}`))
	}))
	defer srv.Close()
	defer close(done) // before srv.Close, which waits for the handler
	paused := make(chan chan time.Time)
	r := &runner{cfg: Config{Job: "j", Attempt: 1}, c: client.New(srv.URL, "secret"), log: slog.New(slog.DiscardHandler), spool: spool,
		after: func(time.Duration) <-chan time.Time {
			ch := make(chan time.Time, 1)
			select {
			case paused <- ch:
			case <-done:
			}
			return ch
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, stopNow := context.WithCancel(context.Background())
	shipped := make(chan error, 1)
	write("one\n")
	go func() { shipped <- r.ship(ctx, stop) }()

	next := func() string {
		t.Helper()
		select {
		case c := <-chunks:
			return c
		case <-paused:
			t.Fatal("paused where a chunk was due")
		case <-time.After(30 * time.Second):
			t.Fatal("no chunk sent")
		}
		return ""
	}
	pause := func() {
		t.Helper()
		select {
		case c := <-chunks:
			t.Fatalf("chunk %q sent at once after the last, no pause between", c)
		case ch := <-paused:
			ch <- time.Time{}
		case <-time.After(30 * time.Second):
			t.Fatal("no pause")
		}
	}

	if c := next(); c != "one\n" {
		t.Fatalf("first chunk %q", c)
	}
	write("two\n") // while "one" is being sent
	write("three\n")
	release <- struct{}{}
	pause()
	if c := next(); c != "two\nthree\n" {
		t.Fatalf("second chunk %q, want the two lines written during the first send", c)
	}
	release <- struct{}{}
	pause()
	idle := <-paused // caught up: the file is at its end

	// Behind: a chunk that fills the buffer is followed at once.
	big := make([]byte, 64<<10+5)
	for i := range big {
		big[i] = 'x'
	}
	write(string(big))
	idle <- time.Time{}
	if c := next(); len(c) != 64<<10 {
		t.Fatalf("chunk of %d bytes, want a full buffer", len(c))
	}
	release <- struct{}{}
	if c := next(); c != "xxxxx" {
		t.Fatalf("chunk %q after a full buffer, want the rest at once", c)
	}
	release <- struct{}{}
	pause()

	stopNow()
	for {
		select {
		case ch := <-paused: // a pause that began before the stop
			ch <- time.Time{}
			continue
		case err := <-shipped:
			if err != nil {
				t.Fatal(err)
			}
		}
		break
	}
}
