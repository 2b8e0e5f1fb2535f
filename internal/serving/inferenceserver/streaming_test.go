package inferenceserver

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStreaming: a run() returning a generator is sent chunked, each piece
// as it is produced: the client reads the first before the generator has
// made the second (it waits for a gate the test opens only then).
func TestStreaming(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    pass
def run(raw_data):
    def tokens():
        yield "data: first\n\n"
        wait_for("gate")
        yield "data: second\n\n"
    return tokens()
`, nil)
	base := URL(rep.ready(t).Address)
	// A server that buffered the whole answer would hold it until the gate
	// opens, which it never does: the context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/score", strings.NewReader("go"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if diff := cmp.Diff([]string{"chunked"}, resp.TransferEncoding); diff != "" {
		t.Errorf("transfer encoding (-want +got):\n%s", diff)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "data: first\n" {
		t.Fatalf("first piece: %q, %v", first, err)
	}
	if _, err := os.Stat(filepath.Join(rep.dir, "gate")); err == nil {
		t.Fatal("the gate is open before the test opened it")
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest: %q, %v", rest, err)
	}
}

// TestStreamingAMLResponse: an AMLResponse whose body is a generator is
// streamed with its own content type (server-sent events here); a stream
// that raises midway ends without its last chunk, so the client sees an
// incomplete answer, and the traceback goes to the log.
func TestStreamingAMLResponse(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
from azureml.contrib.services.aml_response import AMLResponse
def init():
    pass
def run(raw_data):
    def events():
        yield "data: one\n\n"
        if raw_data == "fail":
            raise RuntimeError("the model lost its place")
        yield b"data: two\n\n"
    return AMLResponse(events(), 200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
`, nil)
	base := URL(rep.ready(t).Address)
	resp, body := post(t, base+"/score", "ok")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Cache-Control") != "no-cache" || body != "data: one\n\ndata: two\n\n" {
		t.Errorf("events: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	r, err := http.Post(base+"/score", "text/plain", strings.NewReader("fail"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err == nil || string(b) != "data: one\n\n" {
		t.Errorf("a stream that raised: %q, %v; want its first event and an error", b, err)
	}
	rep.waitLog(t, "RuntimeError: the model lost its place")
}

// TestBodyLimit: a body over the replica's limit is refused with 413,
// whether its length is declared or it comes chunked; one at the limit
// is scored.
func TestBodyLimit(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
def init():
    pass
def run(raw_data):
    return len(raw_data)
`, func(r *Replica) { r.MaxRequestBytes = 1024 })
	base := URL(rep.ready(t).Address)
	if resp, body := post(t, base+"/score", strings.Repeat("a", 1024)); resp.StatusCode != 200 || body != "1024" {
		t.Errorf("1024 bytes: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, base+"/score", strings.Repeat("a", 1025)); resp.StatusCode != 413 || !strings.Contains(body, "1024") {
		t.Errorf("1025 bytes: %d %s, want 413 naming the limit", resp.StatusCode, body)
	}
	// io.MultiReader hides the length: the client sends it chunked.
	resp, err := http.Post(base+"/score", "text/plain", io.MultiReader(strings.NewReader(strings.Repeat("b", 4096))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("4096 bytes chunked: %d, want 413", resp.StatusCode)
	}
	if resp, body := post(t, base+"/score", "small"); resp.StatusCode != 200 || body != "5" {
		t.Errorf("after refusals: %d %s", resp.StatusCode, body)
	}
}
