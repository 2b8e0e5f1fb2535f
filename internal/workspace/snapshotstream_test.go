package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// streamOf makes a snapshot stream of name → content.
func streamOf(t *testing.T, files ...[2]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	sw := snapshot.NewStreamWriter(&b)
	for _, f := range files {
		if err := sw.WriteData(snapshot.File{Path: f[0], Mode: 0o644}, []byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// A run token's stream is held to its output quota, and the job may read
// back the snapshot and the files it streamed, as after PutBlobs and
// CreateSnapshot.
func TestSnapshotStreamIsScopedAndMetered(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	s.cfg.OutputQuota = 1000
	submit(t, s, "job")
	dispatch(t, s)
	run := runPrincipal("job", 1)

	got, err := s.PutSnapshotStream(ctx, run, streamOf(t, [2]string{"b/loss.txt", strings.Repeat("a", 300)}, [2]string{"a.txt", "hello"}, [2]string{"copy.txt", "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &snapshot.Manifest{Files: []snapshot.File{
		{Path: "a.txt", Mode: 0o644, Size: 5, Digest: digestOf("hello")},
		{Path: "b/loss.txt", Mode: 0o644, Size: 300, Digest: digestOf(strings.Repeat("a", 300))},
		{Path: "copy.txt", Mode: 0o644, Size: 5, Digest: digestOf("hello")},
	}}
	if got != (apitypes.StreamedSnapshot{ID: want.ID(), Files: 3, Bytes: 310}) {
		t.Errorf("PutSnapshotStream = %+v, want id %s, 3 files, 310 bytes", got, want.ID())
	}
	m, err := s.GetSnapshot(ctx, run, got.ID)
	if err != nil {
		t.Fatalf("the job reads its own snapshot: %v", err)
	}
	if m.ID() != want.ID() {
		t.Errorf("stored manifest %+v, want %+v", m, want)
	}
	f, err := s.OpenBlob(ctx, run, digestOf("hello"))
	if err != nil {
		t.Fatalf("the job reads a file it streamed: %v", err)
	}
	data, _ := io.ReadAll(f)
	f.Close()
	if string(data) != "hello" {
		t.Errorf("blob holds %q", data)
	}

	// 310 bytes are used: 700 more pass the quota of 1000.
	_, err = s.PutSnapshotStream(ctx, run, streamOf(t, [2]string{"x", strings.Repeat("x", 400)}, [2]string{"y", strings.Repeat("y", 300)}))
	if apperr.CodeOf(err) != apperr.CodeTooLarge {
		t.Errorf("a stream past the quota: %v, want refused as too large", err)
	}
	if s.blobs.Has(digestOf(strings.Repeat("x", 400))) {
		t.Error("a stream refused for its quota stored its first file")
	}
	if _, err := s.PutSnapshotStream(ctx, run, streamOf(t, [2]string{"z", strings.Repeat("z", 600)})); err != nil {
		t.Errorf("a stream within the quota: %v", err)
	}
	// The owner is not held to a job's quota.
	if _, err := s.PutSnapshotStream(ctx, owner, streamOf(t, [2]string{"f", strings.Repeat("f", 5000)})); err != nil {
		t.Errorf("owner: %v", err)
	}
}

func TestSnapshotStreamRefusals(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	s.cfg.MaxSnapshotSize = 100
	tests := []struct {
		name     string
		body     io.Reader
		code     apperr.Code
		contains string
	}{
		{"duplicate", streamOf(t, [2]string{"a", "1"}, [2]string{"a", "2"}), apperr.CodeInvalid, `record 2: unsafe path "a": sent more than once`},
		{"file over the snapshot limit", streamOf(t, [2]string{"big", strings.Repeat("b", 101)}), apperr.CodeTooLarge, "over the limit of 100"},
		{"total over the snapshot limit", streamOf(t, [2]string{"a", strings.Repeat("a", 60)}, [2]string{"b", strings.Repeat("b", 60)}), apperr.CodeTooLarge, "would pass its limit of 100"},
		{"not a stream", strings.NewReader("{\"files\":[]}"), apperr.CodeInvalid, "does not begin with"},
		{"truncated", io.LimitReader(streamOf(t, [2]string{"a", "abcdef"}), 14), apperr.CodeInvalid, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.PutSnapshotStream(ctx, owner, tt.body)
			if apperr.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("err = %v (code %v), want code %v containing %q", err, apperr.CodeOf(err), tt.code, tt.contains)
			}
			if !strings.Contains(err.Error(), "nothing was stored") {
				t.Errorf("err = %v, want it to say nothing was stored", err)
			}
		})
	}
	if s.blobs.Has(digestOf("1")) || s.blobs.Has(digestOf(strings.Repeat("a", 60))) {
		t.Error("a refused stream stored a file")
	}
}

// On a full disk a stream is answered apperr.CodeNoSpace, stores nothing, and the
// job shows the disk is full until a later upload succeeds.
func TestSnapshotStreamOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	dir := t.TempDir()
	testutil.MountTmpfs(t, dir, "1m")
	small, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.blobs = small
	submit(t, s, "job")
	dispatch(t, s)
	run := runPrincipal("job", 1)
	_, err = s.PutSnapshotStream(ctx, run, streamOf(t, [2]string{"a", "tiny"}, [2]string{"big", strings.Repeat("b", 2<<20)}))
	if apperr.CodeOf(err) != apperr.CodeNoSpace {
		t.Fatalf("a stream past the disk: %v, want apperr.CodeNoSpace", err)
	}
	if small.Has(digestOf("tiny")) {
		t.Error("a stream that filled the disk stored its first file")
	}
	if why := s.diskFullReason("job"); !strings.Contains(why, "disk full") {
		t.Errorf("the job's disk-full reason is %q, want it to say the disk is full", why)
	}
	if _, err := s.PutSnapshotStream(ctx, run, streamOf(t, [2]string{"a", "tiny"})); err != nil {
		t.Fatalf("a stream that fits: %v", err)
	}
	if why := s.diskFullReason("job"); why != "" {
		t.Errorf("after an upload that fits, the disk-full reason is still %q", why)
	}
}
