package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

// routeCounter forwards to a server and counts the requests by route
// ("POST /v1/blobs/missing", "PUT /v1/blobs/", ...).
type routeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (rc *routeCounter) get(route string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n[route]
}

func (rc *routeCounter) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.n = map[string]int{}
}

func countRoutes(t *testing.T, url string) (string, *routeCounter) {
	t.Helper()
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	rc := &routeCounter{n: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.Path
		if r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/v1/blobs/") {
			route = "PUT /v1/blobs/"
		}
		rc.mu.Lock()
		rc.n[route]++
		rc.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, rc
}

// bigFile is the size of a file past what the server reads whole (the
// blob store's packMax).
const bigFile = 1 << 20

// codeTree writes n small files and two copies of a file past bigFile.
func codeTree(t *testing.T, n int) (string, []byte) {
	t.Helper()
	src := t.TempDir()
	for i := range n {
		p := filepath.Join(src, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d.py", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, "print(%d)\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("B"), bigFile+1)
	for _, name := range []string{"big.bin", "big-copy.bin"} {
		if err := os.WriteFile(filepath.Join(src, name), big, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src, big
}

func walk(t *testing.T, dir string, cache *snapshot.StatCache) *snapshot.Tree {
	t.Helper()
	tree, err := snapshot.Walk(dir, snapshot.BuildOptions{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// laterClock puts a stat cache's builds an hour ahead, so that the files
// a test just wrote are trusted (not in the racy window).
func laterClock() time.Time { return time.Now().Add(time.Hour) }

// UploadTree stores the snapshot Build makes of the folder, asking once
// which blobs are missing and sending them in one batch, the large one
// once; sent again with its stat cache, it reads nothing
// and only asks whether the server holds the manifest, or sends that.
func TestUploadTreeRoundTripsAndResendsOnlyTheManifest(t *testing.T) {
	url, token, blobs := testWorkspace(t, new(atomic.Int64))
	proxied, routes := countRoutes(t, url)
	c := New(proxied, token)
	src, big := codeTree(t, 1500)
	want, _, err := snapshot.Build(src, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cache := snapshot.NewStatCache(filepath.Join(t.TempDir(), "cache"), laterClock)
	var progress atomic.Int64
	id, stats, err := c.UploadTree(context.Background(), walk(t, src, cache), func(n int64) { progress.Add(n) })
	if err != nil {
		t.Fatal(err)
	}
	if id != want.ID() {
		t.Errorf("snapshot id %s, want Build's %s", id, want.ID())
	}
	wantStats := UploadStats{Files: 1502, Uploaded: 1501, Bytes: want.TotalSize() - int64(len(big))}
	if d := cmp.Diff(wantStats, stats); d != "" || progress.Load() != wantStats.Bytes {
		t.Errorf("stats (-want +got):\n%s\nprogress %d", d, progress.Load())
	}
	for route, n := range map[string]int{"POST /v1/blobs/missing": 1, "POST /v1/blobs/batch": 1, "POST /v1/snapshots": 1} {
		if got := routes.get(route); got != n {
			t.Errorf("%s: %d requests, want %d", route, got, n)
		}
	}
	if len(routes.n) != 3 {
		t.Errorf("requests %v, want only these", routes.n)
	}
	for _, d := range want.Digests() {
		if !blobs.Has(d) {
			t.Fatalf("blob %s not stored", d)
		}
	}
	dest := filepath.Join(t.TempDir(), "out")
	if err := c.Download(context.Background(), id, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "d7", "f1237.py")); err != nil || string(b) != "print(1237)\n" {
		t.Errorf("downloaded f1237.py = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "big-copy.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("downloaded big-copy.bin: %d bytes, %v", len(b), err)
	}

	routes.reset()
	id, stats, err = c.UploadTree(context.Background(), walk(t, src, cache), nil)
	if err != nil || id != want.ID() || stats.Uploaded != 0 {
		t.Fatalf("second UploadTree = %s, %+v, %v; want %s and nothing sent", id, stats, err, want.ID())
	}
	if routes.get("POST /v1/blobs/missing") != 1 || len(routes.n) != 1 {
		t.Errorf("second UploadTree made requests %v, want one question (is the manifest stored?)", routes.n)
	}

	// A file deleted: the rest is known, the manifest is new.
	if err := os.Remove(filepath.Join(src, "d7", "f1237.py")); err != nil {
		t.Fatal(err)
	}
	want, _, err = snapshot.Build(src, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	routes.reset()
	id, stats, err = c.UploadTree(context.Background(), walk(t, src, cache), nil)
	if err != nil || id != want.ID() || stats.Uploaded != 0 {
		t.Fatalf("UploadTree after a delete = %s, %+v, %v; want %s and nothing sent", id, stats, err, want.ID())
	}
	if routes.get("POST /v1/blobs/missing") != 1 || routes.get("POST /v1/snapshots") != 1 || len(routes.n) != 2 {
		t.Errorf("UploadTree after a delete made requests %v, want one question and the manifest", routes.n)
	}

	// A file changed: it alone is read, asked about and sent.
	if err := os.WriteFile(filepath.Join(src, "d3", "f3.py"), []byte("print('changed')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _, err = snapshot.Build(src, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	routes.reset()
	id, stats, err = c.UploadTree(context.Background(), walk(t, src, cache), nil)
	if err != nil || id != want.ID() || stats.Uploaded != 1 {
		t.Fatalf("UploadTree after a change = %s, %+v, %v; want %s and one file sent", id, stats, err, want.ID())
	}
	for route, n := range map[string]int{"POST /v1/blobs/missing": 1, "POST /v1/blobs/batch": 1, "POST /v1/snapshots": 1} {
		if got := routes.get(route); got != n {
			t.Errorf("after a change, %s: %d requests, want %d", route, got, n)
		}
	}
}

// A stat cache that knows every file says nothing of what the server
// holds: to a server that lacks the blobs, the manifest is refused and
// the files are sent after all.
func TestUploadTreeSendsWhatANewServerLacks(t *testing.T) {
	src, _ := codeTree(t, 50)
	cache := snapshot.NewStatCache(filepath.Join(t.TempDir(), "cache"), laterClock)
	first, token1, _ := testWorkspace(t, new(atomic.Int64))
	if _, _, err := New(first, token1).UploadTree(context.Background(), walk(t, src, cache), nil); err != nil {
		t.Fatal(err)
	}
	second, token2, blobs := testWorkspace(t, new(atomic.Int64))
	proxied, routes := countRoutes(t, second)
	id, stats, err := New(proxied, token2).UploadTree(context.Background(), walk(t, src, cache), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := snapshot.Build(src, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id != want.ID() || stats.Uploaded != 51 {
		t.Errorf("UploadTree = %s, %+v; want %s with 51 blobs sent", id, stats, want.ID())
	}
	if routes.get("POST /v1/snapshots") != 2 || routes.get("POST /v1/blobs/missing") != 2 {
		t.Errorf("requests %v, want a question about the manifest, the manifest refused, a question about the files, the uploads and the manifest again", routes.n)
	}
	for _, d := range want.Digests() {
		if !blobs.Has(d) {
			t.Fatalf("blob %s not stored", d)
		}
	}
}

// A large tree is sent while it is read: the server is asked about the
// first files before the last are hashed.
func TestUploadTreeSendsWhileItReads(t *testing.T) {
	url, token, _ := testWorkspace(t, new(atomic.Int64))
	proxied, routes := countRoutes(t, url)
	src := t.TempDir()
	const n = 2*flushBytes/bigFile + 4 // files of bigFile bytes
	for i := range n {
		data := bytes.Repeat([]byte{byte(i)}, bigFile)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%02d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, stats, err := New(proxied, token).UploadTree(context.Background(), walk(t, src, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Uploaded != n {
		t.Errorf("sent %d blobs, want %d", stats.Uploaded, n)
	}
	// Every flushBytes read, then the rest: 3 times, or 2 where the
	// last runs were hashed out of order.
	if got := routes.get("POST /v1/blobs/missing"); got < 2 {
		t.Errorf("asked which blobs are missing %d times, want one every %d MiB read", got, flushBytes>>20)
	}
}

// A file that is gone by the time it is read fails the upload, naming it,
// and stores no snapshot.
func TestUploadTreeNamesAFileThatCannotBeRead(t *testing.T) {
	url, token, _ := testWorkspace(t, new(atomic.Int64))
	proxied, routes := countRoutes(t, url)
	src, _ := codeTree(t, 300)
	tree := walk(t, src, nil)
	if err := os.Remove(filepath.Join(src, "d3", "f123.py")); err != nil {
		t.Fatal(err)
	}
	_, _, err := New(proxied, token).UploadTree(context.Background(), tree, nil)
	if err == nil || !strings.Contains(err.Error(), "d3/f123.py") {
		t.Errorf("err = %v, want one naming d3/f123.py", err)
	}
	if routes.get("POST /v1/snapshots") != 0 {
		t.Error("a snapshot was stored")
	}
}

// An upload the server refuses ends UploadTree with its error.
func TestUploadTreeReturnsTheServersError(t *testing.T) {
	url, token, _ := testWorkspace(t, new(atomic.Int64))
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/blobs/batch" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusInsufficientStorage)
			fmt.Fprint(w, `{"status":507,"detail":"the server's disk is full"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	src, _ := codeTree(t, 20)
	_, _, err = New(srv.URL, token).UploadTree(context.Background(), walk(t, src, nil), nil)
	if StatusOf(err) != http.StatusInsufficientStorage {
		t.Errorf("err = %v, want the server's 507", err)
	}
}
