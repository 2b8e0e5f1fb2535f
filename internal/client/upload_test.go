package client

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// testWorkspace serves the real API of a fresh workspace and returns its
// URL, owner token and blob store; requests counts the blob uploads.
func testWorkspace(t *testing.T, requests *atomic.Int64) (string, string, *blob.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(context.Background(), workspace.Config{Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://unused",
		Targets: func(*spec.Compute) (compute.Target, error) { return noTarget{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	secret := "fry_test-owner-token"
	if err := st.CreateToken(context.Background(), store.Token{Hash: auth.Hash(secret), Kind: auth.KindOwner, Subject: "owner", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h := api.New(ws, api.Workloads{}, st, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/blobs/") && r.URL.Path != "/v1/blobs/missing" && r.Method != "GET" {
			requests.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, secret, blobs
}

func TestUploadBatchesSmallFilesAndRoundTrips(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	src := t.TempDir()
	const n = 2500
	for i := range n {
		p := filepath.Join(src, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("B"), bigFile+1)
	if err := os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	m, files, err := snapshot.Build(src, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(url, token)
	var sent atomic.Int64
	id, stats, err := c.UploadData(context.Background(), m, files, nil, func(k int64) { sent.Add(k) })
	if err != nil {
		t.Fatal(err)
	}
	if stats.Uploaded != n+1 || stats.Bytes != m.TotalSize() || sent.Load() != m.TotalSize() {
		t.Errorf("stats = %+v, progress %d; want %d blobs of %d bytes", stats, sent.Load(), n+1, m.TotalSize())
	}
	// One batch for all (under batchBlobs and batchBytes), the big file
	// too.
	if got := requests.Load(); got != 1 {
		t.Errorf("%d upload requests, want 1", got)
	}
	for _, d := range m.Digests() {
		if !blobs.Has(d) {
			t.Fatalf("blob %s not stored", d)
		}
	}
	dest := filepath.Join(t.TempDir(), "out")
	if err := c.Download(context.Background(), id, dest); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dest, "d7", "f1237.txt"))
	if err != nil || string(got) != "file 1237\n" {
		t.Errorf("downloaded f1237.txt = %q, %v", got, err)
	}

	// A second upload of the same tree sends nothing.
	requests.Store(0)
	if _, stats, err := c.UploadData(context.Background(), m, files, nil, nil); err != nil || stats.Uploaded != 0 || requests.Load() != 0 {
		t.Errorf("re-upload: stats %+v, %d requests, err %v; want nothing sent", stats, requests.Load(), err)
	}
}

func TestBatchWithABadBlobStoresNothing(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	good := []byte("good")
	var body bytes.Buffer
	tw := tar.NewWriter(&body)
	for _, e := range []struct {
		name    string
		content []byte
	}{{digest(good), good}, {digest([]byte("other")), []byte("liar")}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.content)
	}
	tw.Close()
	c := New(url, token)
	_, err := c.request(context.Background(), "POST", "/v1/blobs/batch", &body, "application/x-tar")
	if StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "does not hash to its name") {
		t.Errorf("bad batch: err = %v, want 400 naming the mismatch", err)
	}
	if blobs.Has(digest(good)) {
		t.Error("a batch with a bad blob stored its good one")
	}
}

// noTarget stands in for the local target, which these tests do not use.
type noTarget struct{}

func (noTarget) Type() string                             { return "local" }
func (noTarget) Admit(*spec.Job, *environment.Spec) error { return nil }
func (noTarget) Capacity() int                            { return 1 }
func (noTarget) Launch(context.Context, compute.Launch) (compute.Handle, error) {
	return "", errors.New("no jobs in this test")
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// UploadData sends what BuildOutputs read while hashing, not the files as
// they are now: a file rewritten after it was hashed does not spoil the
// batch, and the server stores the content the manifest names.
func TestUploadDataSendsWhatWasHashed(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	src := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), fmt.Appendf(nil, "output %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := snapshot.BuildOutputs(src, snapshot.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ob.Data) != 20 {
		t.Fatalf("BuildOutputs kept the content of %d files, want 20", len(ob.Data))
	}
	// Rewritten after hashing: read again, the batch would not match its
	// digest.
	if err := os.WriteFile(filepath.Join(src, "f3"), []byte("changed since"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := New(url, token)
	if _, _, err := c.UploadData(context.Background(), ob.Manifest, ob.Files, ob.Data, nil); err != nil {
		t.Fatalf("UploadData: %v", err)
	}
	for _, f := range ob.Manifest.Files {
		r, err := blobs.Open(f.Digest)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		r.Close()
	}
	if requests.Load() != 1 {
		t.Errorf("%d upload requests, want 1 batch", requests.Load())
	}
}
