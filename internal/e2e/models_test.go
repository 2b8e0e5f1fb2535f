package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// uploadCounter is a reverse proxy in front of a server that counts the
// request bytes sent to the endpoints that carry file contents: one blob,
// a batch of blobs, or a snapshot stream. Asking which blobs are missing
// and storing a manifest carry none.
type uploadCounter struct {
	url   string
	bytes atomic.Int64
	calls atomic.Int64
}

func newUploadCounter(t *testing.T, target string) *uploadCounter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &uploadCounter{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		content := (r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/v1/blobs/")) ||
			(r.Method == "POST" && (r.URL.Path == "/v1/blobs/batch" || r.URL.Path == "/v1/snapshots/stream"))
		if content {
			c.calls.Add(1)
			r.Body = &countingBody{ReadCloser: r.Body, n: &c.bytes}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *uploadCounter) reset() { c.bytes.Store(0); c.calls.Store(0) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// treeOf reads every file under dir: its content and permission bits.
// With snapshotModes, the bits are those a snapshot keeps: like git, it
// keeps whether a file is executable (0755) or not (0644).
func treeOf(t *testing.T, dir string, snapshotModes bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		mode := info.Mode().Perm()
		if snapshotModes && mode&0o100 != 0 {
			mode = 0o755
		} else if snapshotModes {
			mode = 0o644
		}
		out[rel] = mode.String() + " " + string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type modelOut struct {
	ID, Name, Version, Type, Snapshot string
	Archived                          bool
	Tags                              map[string]string
}

func parseModel(t *testing.T, r result) modelOut {
	t.Helper()
	var m modelOut
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("not a model: %v\n%s", err, r)
	}
	return m
}

func TestModelRegistry(t *testing.T) {
	s := startServer(t)
	counter := newUploadCounter(t, s.url)
	// The CLI talks to the server through the counter; home is where its
	// upload cache (the digests of files it hashed) lives.
	ferryVia := func(home string, args ...string) result {
		t.Helper()
		return runFerry(t, []string{"FERRY_URL=" + counter.url, "FERRY_TOKEN=" + s.token, "FERRY_HOME=" + home}, args...)
	}
	mustVia := func(home string, args ...string) result {
		t.Helper()
		r := ferryVia(home, args...)
		if r.code != 0 {
			t.Fatalf("ferry %s: %s", strings.Join(args, " "), r)
		}
		return r
	}

	dir := t.TempDir()
	weights := make([]byte, 1<<20)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{
		"model.yml": `$schema: https://azuremlschemas.azureedge.net/latest/model.schema.json
name: iris
path: ./model
type: mlflow_model
description: iris classifier
tags:
  framework: sklearn
`,
		"model/MLmodel":           "flavors: {python_function: {loader_module: mlflow.sklearn}}\n",
		"model/weights.bin":       string(weights),
		"model/conda.yaml":        "dependencies: [python=3.11]\n",
		"model/code/score.sh":     "#!/bin/sh\necho scoring\n",
		"model/code/calib/a.json": `{"t": 1.5}`,
	})
	if err := os.Chmod(filepath.Join(dir, "model/code/score.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "model/conda.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "model.yml")
	home := t.TempDir()

	// First create: the files go up, at least their size in bytes.
	v1 := parseModel(t, mustVia(home, "model", "create", "-f", file, "-o", "json"))
	if v1.ID != "azureml:iris:1" || v1.Version != "1" || v1.Type != "mlflow_model" || v1.Tags["framework"] != "sklearn" {
		t.Fatalf("first create: %+v", v1)
	}
	t.Logf("first create: %d bytes of content in %d upload requests", counter.bytes.Load(), counter.calls.Load())
	if n := counter.bytes.Load(); n < int64(len(weights)) {
		t.Errorf("first create sent %d bytes of content, less than the %d of weights.bin", n, len(weights))
	}

	// Re-creating it unchanged sends no file content, whether this client
	// remembers hashing the files (same home) or hashes them again and
	// asks the server (a fresh home): the same version comes back.
	for what, h := range map[string]string{"same home": home, "fresh home": t.TempDir()} {
		counter.reset()
		r := mustVia(h, "model", "create", "-f", file, "-o", "json")
		if m := parseModel(t, r); m.Version != "1" || m.Snapshot != v1.Snapshot {
			t.Errorf("%s: unchanged re-create gave %+v, want version 1", what, m)
		}
		if n, calls := counter.bytes.Load(), counter.calls.Load(); n != 0 || calls != 0 {
			t.Errorf("%s: unchanged re-create sent %d bytes in %d upload requests, want none", what, n, calls)
		}
		mustContain(t, what+" stderr", r.stderr, "nothing to upload")
	}

	// One small file changed: only it is sent, and it is version 2.
	writeFiles(t, dir, map[string]string{"model/code/calib/a.json": `{"t": 2.5}`})
	counter.reset()
	v2 := parseModel(t, mustVia(home, "model", "create", "-f", file, "-o", "json"))
	if v2.Version != "2" || v2.Snapshot == v1.Snapshot {
		t.Errorf("changed model: %+v, want version 2 with a new snapshot", v2)
	}
	t.Logf("one file changed: %d bytes of content in %d upload requests", counter.bytes.Load(), counter.calls.Load())
	if n := counter.bytes.Load(); n == 0 || n >= 64<<10 {
		t.Errorf("one changed 10-byte file: sent %d bytes, want more than 0 and far less than the 1 MiB unchanged", n)
	}
	// Other content under an existing version is refused, saying why.
	r := ferryVia(home, "model", "create", "-f", file, "--version", "1")
	if r.code == 0 {
		t.Fatalf("iris:1 with other files was accepted: %s", r)
	}
	mustContain(t, "conflict", r.stderr, "iris:1", "other content", "leave version out to get 3")

	// list, show: by version, by label, by reference.
	list := mustVia(home, "model", "list")
	mustContain(t, "list", list.stdout, "iris", "mlflow_model", "iris classifier")
	for _, args := range [][]string{
		{"iris@latest"}, {"azureml:iris@latest"}, {"iris", "--label", "latest"}, {"--name", "iris", "--label", "latest"},
		{"azureml:iris:2"}, {"iris", "--version", "2"},
	} {
		m := parseModel(t, mustVia(home, append([]string{"model", "show", "-o", "json"}, args...)...))
		if m.Version != "2" {
			t.Errorf("model show %v: version %s, want 2", args, m.Version)
		}
	}
	if m := parseModel(t, mustVia(home, "model", "show", "azureml:iris:1", "-o", "json")); m.Snapshot != v1.Snapshot {
		t.Errorf("azureml:iris:1 is %+v", m)
	}
	mustContain(t, "model show", mustVia(home, "model", "show", "iris@latest").stdout,
		"version:", "mlflow_model", "framework=sklearn", "model: azureml:iris:2")
	r = ferryVia(home, "model", "show", "iris")
	if r.code == 0 || !strings.Contains(r.stderr, "--label latest") {
		t.Errorf("show with no version: %s; want it to ask for one", r)
	}

	// Download gives the files as they are, modes too, and nothing else.
	out := t.TempDir()
	dl := mustVia(t.TempDir(), "model", "download", "iris", "--version", "2", "--download-path", out)
	mustContain(t, "download", dl.stdout, filepath.Join(out, "iris"))
	want := treeOf(t, filepath.Join(dir, "model"), true)
	if d := cmp.Diff(want, treeOf(t, filepath.Join(out, "iris"), false)); d != "" {
		t.Errorf("downloaded files (-model folder +downloaded):\n%.2000s", d)
	}
	if got := want["code/score.sh"]; !strings.HasPrefix(got, "-rwxr-xr-x") {
		t.Errorf("score.sh was made %q; the test wants an executable file", got)
	}
	if got := want["conda.yaml"]; !strings.HasPrefix(got, "-rw-r--r--") {
		t.Errorf("conda.yaml (0600) is %q in a snapshot, want 0644", got)
	}

	// Archiving 2 hides it from the list and from latest; restoring
	// brings it back.
	mustVia(home, "model", "archive", "iris", "--version", "2")
	if m := parseModel(t, mustVia(home, "model", "show", "iris@latest", "-o", "json")); m.Version != "1" {
		t.Errorf("latest with 2 archived: %s, want 1", m.Version)
	}
	var listed []modelOut
	if err := json.Unmarshal([]byte(mustVia(home, "model", "list", "--name", "iris", "-o", "json").stdout), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Version != "1" {
		t.Errorf("list with 2 archived: %+v, want only iris:1", listed)
	}
	mustContain(t, "list --include-archived", mustVia(home, "model", "list", "--include-archived").stdout, "2 (archived)")
	if m := parseModel(t, mustVia(home, "model", "show", "iris", "--version", "2", "-o", "json")); !m.Archived {
		t.Errorf("iris:2 by version: %+v, want it shown, archived", m)
	}
	mustVia(home, "model", "restore", "iris", "--version", "2")
	if m := parseModel(t, mustVia(home, "model", "show", "iris@latest", "-o", "json")); m.Version != "2" {
		t.Errorf("latest after restore: %s, want 2", m.Version)
	}

	// A server killed with SIGKILL comes back with every version, files
	// included.
	s.kill9()
	s.start()
	if m := parseModel(t, mustVia(home, "model", "show", "azureml:iris:1", "-o", "json")); m.Snapshot != v1.Snapshot {
		t.Errorf("iris:1 after kill -9: %+v", m)
	}
	again := t.TempDir()
	mustVia(home, "model", "download", "iris@latest", "--download-path", again)
	if d := cmp.Diff(want, treeOf(t, filepath.Join(again, "iris"), false)); d != "" {
		t.Errorf("downloaded after kill -9 (-model folder +downloaded):\n%.2000s", d)
	}

	// Without a token the registry answers nothing.
	if code, body := s.call("GET", "/v1/models", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/models with no token: %d %s", code, body)
	}
}

// A bad model file is refused before anything is uploaded, with the file,
// the line and the field named.
func TestModelFileErrors(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"bad-type.yml":  "name: iris\npath: ./m\ntype: keras\n",
		"unknown.yml":   "name: iris\npath: ./m\nflavors: {}\n",
		"no-path.yml":   "name: iris\npath: ./nowhere\n",
		"remote.yml":    "name: iris\npath: azureml://datastores/x/paths/m\n",
		"m/weights.bin": "w",
	})
	for file, wants := range map[string][]string{
		"bad-type.yml": {"bad-type.yml", "type (line 3)", "custom_model, mlflow_model and triton_model"},
		"unknown.yml":  {"unknown.yml", "flavors", "line 3"},
		"no-path.yml":  {"no-path.yml:2: path:", "./nowhere does not exist"},
		"remote.yml":   {"remote.yml:2: path:", "not a local path"},
	} {
		r := s.ferry("model", "create", "-f", filepath.Join(dir, file))
		if r.code == 0 {
			t.Errorf("%s accepted: %s", file, r)
			continue
		}
		mustContain(t, file, r.stderr, wants...)
	}
	r := s.ferry("model", "create", "-f", filepath.Join(dir, "bad-type.yml"), "--set", "type=triton_model", "--name", "ok", "-o", "json")
	if r.code != 0 || !bytes.Contains([]byte(r.stdout), []byte(`"triton_model"`)) {
		t.Errorf("--set fixing the type: %s", r)
	}

	// A model that is one file downloads as that file in DIR/NAME.
	writeFiles(t, dir, map[string]string{"one.yml": "name: single\npath: m/weights.bin\n"})
	s.mustFerry("model", "create", "-f", filepath.Join(dir, "one.yml"))
	out := t.TempDir()
	s.mustFerry("model", "download", "single@latest", "--download-path", out)
	if d := cmp.Diff(map[string]string{"weights.bin": "-rw-r--r-- w"}, treeOf(t, filepath.Join(out, "single"), false)); d != "" {
		t.Errorf("a one-file model downloaded (-want +got):\n%s", d)
	}
}
