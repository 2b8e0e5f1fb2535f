package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

// TestUploadStreamRoundTrips sends a folder of tiny files, a duplicate and
// a file past the pack limit as one snapshot stream to a real server: the
// server stores the snapshot the client would have made (the same id), and
// it downloads as it was.
func TestUploadStreamRoundTrips(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	src := t.TempDir()
	const n = 1500
	for i := range n {
		p := filepath.Join(src, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("B"), 3<<20)
	for _, name := range []string{"big.bin", "big-copy.bin"} {
		if err := os.WriteFile(filepath.Join(src, name), big, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := snapshot.BuildOutputs(src, snapshot.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(url, token)
	var sent atomic.Int64
	id, stats, err := c.UploadStream(context.Background(), ob.Manifest, ob.Files, ob.Data, func(k int64) { sent.Add(k) })
	if err != nil {
		t.Fatal(err)
	}
	if id != ob.Manifest.ID() {
		t.Errorf("snapshot id %s, want the client's %s", id, ob.Manifest.ID())
	}
	if stats.Uploaded != n+2 || stats.Bytes != ob.Manifest.TotalSize() || sent.Load() != ob.Manifest.TotalSize() {
		t.Errorf("stats = %+v, progress %d; want %d files of %d bytes", stats, sent.Load(), n+2, ob.Manifest.TotalSize())
	}
	if got := requests.Load(); got != 0 {
		t.Errorf("%d blob requests, want none (one stream)", got)
	}
	for _, d := range ob.Manifest.Digests() {
		if !blobs.Has(d) {
			t.Fatalf("blob %s not stored", d)
		}
	}
	got, err := c.GetSnapshot(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ob.Manifest, got); d != "" {
		t.Errorf("stored manifest (-sent +stored):\n%s", d)
	}
	dest := filepath.Join(t.TempDir(), "out")
	if err := c.Download(context.Background(), id, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "d7", "f1237.txt")); err != nil || string(b) != "file 1237\n" {
		t.Errorf("downloaded f1237.txt = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "big-copy.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("downloaded big-copy.bin: %d bytes, %v", len(b), err)
	}
}

// A server without the stream (404 or 405) gets the snapshot the batched
// way.
func TestUploadStreamFallsBackOnOlderServers(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			var requests atomic.Int64
			url, token, blobs := testWorkspace(t, &requests)
			var streams atomic.Int64
			old := oldServer(t, url, status, &streams)
			src := t.TempDir()
			for i := range 30 {
				if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), fmt.Appendf(nil, "out %d\n", i), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ob, err := snapshot.BuildOutputs(src, snapshot.OutputOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id, _, err := New(old, token).UploadStream(context.Background(), ob.Manifest, ob.Files, ob.Data, nil)
			if err != nil || id != ob.Manifest.ID() {
				t.Fatalf("UploadStream = %s, %v; want %s", id, err, ob.Manifest.ID())
			}
			if streams.Load() != 1 || requests.Load() != 1 {
				t.Errorf("%d stream tries and %d blob batches, want 1 and 1", streams.Load(), requests.Load())
			}
			if !blobs.Has(ob.Manifest.Files[0].Digest) {
				t.Error("the fallback stored nothing")
			}
		})
	}
}

// oldServer forwards to url but answers status to POST /v1/snapshots/stream,
// as a server from before it did.
func oldServer(t *testing.T, url string, status int, streams *atomic.Int64) string {
	t.Helper()
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/snapshots/stream" {
			proxy.ServeHTTP(w, r)
			return
		}
		streams.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"status":%d,"detail":"no API operation"}`, status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A stream with a bad record stores nothing, not even its good files, and
// is answered 400 naming the record.
func TestBadStreamStoresNothing(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	rec := func(path, content string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(path)))
		b = append(b, path...)
		b = binary.AppendUvarint(b, 0o644)
		b = binary.AppendUvarint(b, uint64(len(content)))
		return append(b, content...)
	}
	body := []byte(snapshot.StreamMagic)
	body = append(body, rec("good.txt", "good content")...)
	body = append(body, rec("../escape", "bad")...)
	body = append(body, 0)
	c := New(url, token)
	_, err := c.request(context.Background(), "POST", "/v1/snapshots/stream", bytes.NewReader(body), snapshot.StreamContentType)
	if StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), `record 2: unsafe path "../escape"`) {
		t.Errorf("bad stream: err = %v, want 400 naming record 2", err)
	}
	if blobs.Has(digest([]byte("good content"))) {
		t.Error("a stream with a bad record stored its good file")
	}
}
