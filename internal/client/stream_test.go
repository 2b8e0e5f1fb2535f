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
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

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
