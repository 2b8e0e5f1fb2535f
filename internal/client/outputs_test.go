package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

// outputTree writes a folder of tiny files, a file past the size the
// stream reads whole and a copy of it, a FIFO and a link out of it, for
// UploadOutputs.
func outputTree(t *testing.T, n int) (string, []byte) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "outputs")
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
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "passwd")); err != nil {
		t.Fatal(err)
	}
	return src, big
}

// TestUploadOutputsRoundTrips plans a folder and sends it to a real server
// with UploadOutputs, which reads the files as the request carries them
// and hashes nothing: the server stores the snapshot BuildOutputs makes of
// the folder (the same id), it downloads as it was, and the skipped
// entries are those BuildOutputs lists, with a file that vanished after
// the plan added to them.
func TestUploadOutputsRoundTrips(t *testing.T) {
	var requests atomic.Int64
	url, token, blobs := testWorkspace(t, &requests)
	src, big := outputTree(t, 1500)
	writeFile := func(name, content string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("vanishes.txt", "soon gone\n")
	p, err := snapshot.PlanOutputs(src, snapshot.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, "vanishes.txt")); err != nil {
		t.Fatal(err)
	}
	ob, err := snapshot.BuildOutputs(src, snapshot.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(url, token)
	var progress atomic.Int64
	id, sent, err := c.UploadOutputs(context.Background(), p, func(k int64) { progress.Add(k) })
	if err != nil {
		t.Fatal(err)
	}
	if id != ob.Manifest.ID() {
		t.Errorf("snapshot id %s, want BuildOutputs' %s", id, ob.Manifest.ID())
	}
	if sent.Files != 1502 || sent.Bytes != ob.Manifest.TotalSize() || progress.Load() != sent.Bytes {
		t.Errorf("sent %+v files, %d bytes, progress %d; want 1502 files of %d bytes", sent.Files, sent.Bytes, progress.Load(), ob.Manifest.TotalSize())
	}
	want := append(ob.Skipped, snapshot.Skipped{Path: "vanishes.txt", Reason: "cannot be read: no such file or directory"})
	if d := cmp.Diff(want, sent.Skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
	if requests.Load() != 0 {
		t.Errorf("%d blob requests, want none (one stream)", requests.Load())
	}
	for _, d := range ob.Manifest.Digests() {
		if !blobs.Has(d) {
			t.Fatalf("blob %s not stored", d)
		}
	}
	stored, err := c.GetSnapshot(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ob.Manifest, stored); d != "" {
		t.Errorf("stored manifest (-BuildOutputs +stored):\n%s", d)
	}
	dest := filepath.Join(t.TempDir(), "out")
	if err := c.Download(context.Background(), id, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "d7", "f1237.txt")); err != nil || string(b) != "file 1237\n" {
		t.Errorf("downloaded f1237.txt = %q, %v", b, err)
	}
	for _, name := range []string{"big.bin", "big-copy.bin"} {
		if b, err := os.ReadFile(filepath.Join(dest, name)); err != nil || !bytes.Equal(b, big) {
			t.Errorf("downloaded %s: %d bytes, %v", name, len(b), err)
		}
	}
}

// A server without the stream (404 or 405) gets the plan hashed and sent
// the batched way, with the same snapshot and skipped entries.
func TestUploadOutputsFallsBackOnOlderServers(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			var requests atomic.Int64
			url, token, blobs := testWorkspace(t, &requests)
			var streams atomic.Int64
			old := oldServer(t, url, status, &streams)
			src, _ := outputTree(t, 30)
			p, err := snapshot.PlanOutputs(src, snapshot.OutputOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ob, err := snapshot.BuildOutputs(src, snapshot.OutputOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id, sent, err := New(old, token).UploadOutputs(context.Background(), p, nil)
			if err != nil || id != ob.Manifest.ID() {
				t.Fatalf("UploadOutputs = %s, %v; want %s", id, err, ob.Manifest.ID())
			}
			if d := cmp.Diff(ob.Skipped, sent.Skipped); d != "" {
				t.Errorf("skipped (-want +got):\n%s", d)
			}
			if streams.Load() != 1 || requests.Load() == 0 {
				t.Errorf("%d stream tries and %d blob requests, want 1 and some", streams.Load(), requests.Load())
			}
			for _, d := range ob.Manifest.Digests() {
				if !blobs.Has(d) {
					t.Fatalf("the fallback did not store blob %s", d)
				}
			}
		})
	}
}
