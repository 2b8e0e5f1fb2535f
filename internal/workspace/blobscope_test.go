package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
)

// putFile stores content as owner and returns its digest and a one-file
// snapshot of it.
func putFile(t *testing.T, s *Service, content string) (digest, snap string) {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256([]byte(content))
	digest = hex.EncodeToString(sum[:])
	if err := s.PutBlob(ctx, owner, digest, bytes.NewReader([]byte(content))); err != nil {
		t.Fatal(err)
	}
	m := fmt.Sprintf(`{"files":[{"path":"f.txt","mode":420,"size":%d,"sha256":%q}]}`, len(content), digest)
	snap, err := s.CreateSnapshot(ctx, owner, []byte(m))
	if err != nil {
		t.Fatal(err)
	}
	return digest, snap
}

// A run token reads only its own job's content: another job's snapshot
// and files are "not stored" to it, and POST /v1/blobs/missing does not
// tell it which content exists elsewhere.
func TestRunTokenReadsOnlyItsOwnJobsContent(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 2})
	mineDigest, mine := putFile(t, s, "my code")
	theirDigest, theirs := putFile(t, s, "their secret code")
	for name, snap := range map[string]string{"mine": mine, "theirs": theirs} {
		if _, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: name, Command: "true"}, CodeSnapshot: snap}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch(t, s)
	run := runPrincipal("mine", 1)

	if _, err := s.GetSnapshot(ctx, run, mine); err != nil {
		t.Errorf("own snapshot: %v", err)
	}
	if f, err := s.OpenBlob(ctx, run, mineDigest); err != nil {
		t.Errorf("own file: %v", err)
	} else {
		f.Close()
	}
	if _, err := s.GetSnapshot(ctx, run, theirs); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("another job's snapshot: %v, want not found", err)
	}
	if _, err := s.OpenBlob(ctx, run, theirDigest); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("another job's file: %v, want not found", err)
	}
	missing, err := s.MissingBlobs(ctx, run, []string{mineDigest, theirDigest})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || missing[0] != theirDigest {
		t.Errorf("missing = %v, want only the other job's digest (it must not learn that it exists)", missing)
	}
	// Nor can it wrap another job's file into a snapshot of its own.
	m := fmt.Sprintf(`{"files":[{"path":"x","mode":420,"size":17,"sha256":%q}]}`, theirDigest)
	if _, err := s.CreateSnapshot(ctx, run, []byte(m)); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("snapshot of another job's file: %v, want refused as not uploaded", err)
	}
	// What it uploads itself it may use and read back: outputs that happen
	// to equal other content are uploaded again, not borrowed.
	if err := s.PutBlob(ctx, run, theirDigest, bytes.NewReader([]byte("their secret code"))); err != nil {
		t.Fatal(err)
	}
	id, err := s.CreateSnapshot(ctx, run, []byte(m))
	if err != nil {
		t.Fatalf("snapshot of its own upload: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, run, id); err != nil {
		t.Errorf("own new snapshot: %v", err)
	}
	f, err := s.OpenBlob(ctx, run, theirDigest)
	if err != nil {
		t.Fatalf("own upload: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "their secret code" {
		t.Errorf("read back %q", b)
	}
	// Nor record it as its outputs, which would make it readable later.
	if err := s.SetOutputs(ctx, run, "mine", 1, apitypes.Outputs{Artifacts: theirs}); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("another job's snapshot as outputs: %v, want refused", err)
	}
	s.scopes.forget("mine") // as after a server restart
	if _, err := s.GetSnapshot(ctx, run, theirs); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("another job's snapshot after SetOutputs: %v, want not found", err)
	}
	// The owner is not scoped.
	if _, err := s.GetSnapshot(ctx, owner, theirs); err != nil {
		t.Errorf("owner: %v", err)
	}
}

// tarOf is a blob batch: a tar stream of blobs named by their digests.
func tarOf(t *testing.T, contents ...string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, c := range contents {
		sum := sha256.Sum256([]byte(c))
		if err := tw.WriteHeader(&tar.Header{Name: hex.EncodeToString(sum[:]), Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// A job that uploads blobs itself with its run token, past the runner,
// is still held to its output quota by the server: once what it stored
// reaches the quota, nothing more is stored for it, singly or in batches.
func TestRunTokenUploadsAreHeldToTheOutputQuota(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	s.cfg.OutputQuota = 1000
	submit(t, s, "greedy")
	dispatch(t, s)
	run := runPrincipal("greedy", 1)

	put := func(content string) error {
		sum := sha256.Sum256([]byte(content))
		return s.PutBlob(ctx, run, hex.EncodeToString(sum[:]), bytes.NewReader([]byte(content)))
	}
	if err := put(strings.Repeat("a", 600)); err != nil {
		t.Fatalf("600 of 1000 bytes: %v", err)
	}
	if err := put(strings.Repeat("b", 600)); apperr.CodeOf(err) != apperr.CodeTooLarge {
		t.Errorf("1200 of 1000 bytes: %v, want refused as too large", err)
	}
	if _, err := s.PutBlobs(ctx, run, tarOf(t, strings.Repeat("c", 300), strings.Repeat("d", 300))); apperr.CodeOf(err) != apperr.CodeTooLarge {
		t.Errorf("a batch past the quota: %v, want refused as too large", err)
	}
	if n, err := s.PutBlobs(ctx, run, tarOf(t, strings.Repeat("e", 100))); err != nil || n != 1 {
		t.Errorf("a batch within the quota: %d, %v", n, err)
	}
	// The owner is not held to a job's quota.
	sum := sha256.Sum256([]byte(strings.Repeat("f", 5000)))
	if err := s.PutBlob(ctx, owner, hex.EncodeToString(sum[:]), strings.NewReader(strings.Repeat("f", 5000))); err != nil {
		t.Errorf("owner: %v", err)
	}
}
