package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunTokens runs the suite of store.Tokens. It needs store.Jobs too: a job's
// run tokens are written with its record, by UpdateJobWith. open is as for
// Run.
func RunTokens[S jobStore](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) jobStore { return open(t) }, []test[jobStore]{
		{"Token/CreateLookup", testTokenCreateLookup},
		{"Token/Conflict", testTokenConflict},
		{"Token/NotFound", testTokenNotFound},
		{"Token/Delete", testTokenDelete},
		{"Token/WithJobUpdate", testTokenWithJobUpdate},
		{"Token/WithJobUpdateFnError", testTokenWithJobUpdateFnError},
		{"Token/WithJobUpdateConflict", testTokenWithJobUpdateConflict},
	})
}

func mustCreateToken(t *testing.T, s store.Tokens, tok store.Token) {
	t.Helper()
	if err := s.CreateToken(context.Background(), tok); err != nil {
		t.Fatalf("CreateToken(%s %q): %v", tok.Kind, tok.Subject, err)
	}
}

func token(hash, kind, subject string, attempt int) store.Token {
	return store.Token{Hash: hash, Kind: kind, Subject: subject, Attempt: attempt, Created: t0}
}

func testTokenCreateLookup(t *testing.T, s jobStore) {
	want := token("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "run", "j1", 2)
	mustCreateToken(t, s, want)
	got, err := s.TokenByHash(context.Background(), want.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("TokenByHash (-want +got):\n%s", d)
	}
}

func testTokenConflict(t *testing.T, s jobStore) {
	first := token("h1", "owner", "alice", 0)
	mustCreateToken(t, s, first)
	wantErrIs(t, "CreateToken of an existing hash", s.CreateToken(context.Background(), token("h1", "run", "j1", 1)), store.ErrConflict)
	got, err := s.TokenByHash(context.Background(), "h1")
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if d := diff(first, got); d != "" {
		t.Errorf("first token changed by a conflicting create (-want +got):\n%s", d)
	}
}

func testTokenNotFound(t *testing.T, s jobStore) {
	_, err := s.TokenByHash(context.Background(), "nope")
	wantErrIs(t, "TokenByHash of a missing hash", err, store.ErrNotFound)
}

func testTokenDelete(t *testing.T, s jobStore) {
	ctx := context.Background()
	toks := []store.Token{
		token("run-j1-a1", "run", "j1", 1),
		token("run-j1-a2", "run", "j1", 2),
		token("run-j2-a1", "run", "j2", 1),
		token("owner-j1", "owner", "j1", 0), // a user who happens to be called j1
	}
	for _, tok := range toks {
		mustCreateToken(t, s, tok)
		// Looked up before the delete, so that a store that caches
		// lookups has them cached: revocation must still win at once.
		if _, err := s.TokenByHash(ctx, tok.Hash); err != nil {
			t.Fatalf("TokenByHash(%q): %v", tok.Hash, err)
		}
	}
	if err := s.DeleteTokens(ctx, "run", "j1"); err != nil {
		t.Fatalf("DeleteTokens: %v", err)
	}
	for _, tok := range toks {
		_, err := s.TokenByHash(ctx, tok.Hash)
		gone := tok.Kind == "run" && tok.Subject == "j1"
		switch {
		case gone && !errors.Is(err, store.ErrNotFound):
			t.Errorf("TokenByHash(%q) after DeleteTokens(run, j1): got error %v, want ErrNotFound", tok.Hash, err)
		case !gone && err != nil:
			t.Errorf("TokenByHash(%q) after DeleteTokens(run, j1): %v; it should be kept", tok.Hash, err)
		}
	}
	if err := s.DeleteTokens(ctx, "run", "j1"); err != nil {
		t.Errorf("DeleteTokens with nothing to delete: %v", err)
	}
}

// testTokenWithJobUpdate: UpdateJobWith writes the job, its events and
// the token change together; a delete removes only the job's tokens of
// that kind, and wins over a cached lookup at once.
func testTokenWithJobUpdate(t *testing.T, s jobStore) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	tok := token("run-j1-a1", "run", "j1", 1)
	start := store.Event{Time: t0.Add(time.Second), From: "Queued", To: "Preparing", Reason: "started"}
	got, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status, j.Attempt = "Preparing", 1
		return store.JobChange{Events: []store.Event{start}, CreateToken: &tok}, nil
	})
	if err != nil {
		t.Fatalf("UpdateJobWith creating a token: %v", err)
	}
	if got.Status != "Preparing" || got.Attempt != 1 {
		t.Errorf("UpdateJobWith returned status %q attempt %d, want Preparing 1", got.Status, got.Attempt)
	}
	if j := mustGetJob(t, s, "j1"); j.Status != "Preparing" {
		t.Errorf("job status after UpdateJobWith: %q, want Preparing", j.Status)
	}
	start.Job = "j1"
	if d := diff([]store.Event{firstEvent("j1"), start}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("events after UpdateJobWith (-want +got):\n%s", d)
	}
	gotTok, err := s.TokenByHash(ctx, tok.Hash)
	if err != nil {
		t.Fatalf("TokenByHash of the token UpdateJobWith created: %v", err)
	}
	if d := diff(tok, gotTok); d != "" {
		t.Errorf("created token (-want +got):\n%s", d)
	}

	kept := []store.Token{token("run-j2-a1", "run", "j2", 1), token("owner-j1", "owner", "j1", 0)}
	for _, k := range kept {
		mustCreateToken(t, s, k)
	}
	// Two events, stored in order, with the delete.
	fin := store.Event{Time: t0.Add(2 * time.Second), From: "Preparing", To: "Finalizing", Reason: "uploading"}
	end := store.Event{Time: t0.Add(2 * time.Second), From: "Finalizing", To: "Completed", Reason: "done"}
	if _, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status = "Completed"
		return store.JobChange{Events: []store.Event{fin, end}, DeleteTokens: "run"}, nil
	}); err != nil {
		t.Fatalf("UpdateJobWith deleting tokens: %v", err)
	}
	if j := mustGetJob(t, s, "j1"); j.Status != "Completed" {
		t.Errorf("job status after the deleting UpdateJobWith: %q, want Completed", j.Status)
	}
	fin.Job, end.Job = "j1", "j1"
	if d := diff([]store.Event{firstEvent("j1"), start, fin, end}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("events after an UpdateJobWith of two events (-want +got):\n%s", d)
	}
	if _, err := s.TokenByHash(ctx, tok.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash of the job's run token after UpdateJobWith deleted it: got error %v, want ErrNotFound", err)
	}
	for _, k := range kept {
		if _, err := s.TokenByHash(ctx, k.Hash); err != nil {
			t.Errorf("TokenByHash(%q) after deleting j1's run tokens: %v; it should be kept", k.Hash, err)
		}
	}

	// The delete is made even when fn leaves the job as it is (an end
	// reported again).
	again := token("run-j1-a1-again", "run", "j1", 1)
	mustCreateToken(t, s, again)
	if _, err := s.TokenByHash(ctx, again.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJobWith(ctx, "j1", func(*store.Job) (store.JobChange, error) { return store.JobChange{DeleteTokens: "run"}, nil }); err != nil {
		t.Fatalf("UpdateJobWith that changes no job: %v", err)
	}
	if _, err := s.TokenByHash(ctx, again.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash after an UpdateJobWith whose fn changed nothing deleted it: got error %v, want ErrNotFound", err)
	}
}

// testTokenWithJobUpdateFnError: when fn fails, neither the job nor the
// tokens change.
func testTokenWithJobUpdateFnError(t *testing.T, s jobStore) {
	ctx := context.Background()
	want := mustCreateJob(t, s, fullJob("j1"))
	old := token("run-j1-a1", "run", "j1", 1)
	mustCreateToken(t, s, old)
	tok := token("run-j1-a2", "run", "j1", 2)
	for _, ch := range []store.JobChange{{CreateToken: &tok}, {DeleteTokens: "run"}} {
		_, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
			j.Status = "Canceled"
			ch.Events = []store.Event{{Time: t0, From: "Failed", To: "Canceled"}}
			return ch, errTest
		})
		if err != errTest {
			t.Errorf("UpdateJobWith with a failing fn: got error %v, want fn's error as is", err)
		}
	}
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("job changed by an UpdateJobWith whose fn failed (-want +got):\n%s", d)
	}
	if _, err := s.TokenByHash(ctx, tok.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("token created by an UpdateJobWith whose fn failed: TokenByHash got %v, want ErrNotFound", err)
	}
	if _, err := s.TokenByHash(ctx, old.Hash); err != nil {
		t.Errorf("token deleted by an UpdateJobWith whose fn failed: %v", err)
	}
}

// testTokenWithJobUpdateConflict: a token that cannot be created leaves
// the job and its events as they were.
func testTokenWithJobUpdateConflict(t *testing.T, s jobStore) {
	ctx := context.Background()
	want := mustCreateJob(t, s, fullJob("j1"))
	first := token("h1", "owner", "alice", 0)
	mustCreateToken(t, s, first)
	dup := token("h1", "run", "j1", 1)
	_, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status = "Preparing"
		return store.JobChange{Events: []store.Event{{Time: t0, From: "Queued", To: "Preparing"}}, CreateToken: &dup}, nil
	})
	wantErrIs(t, "UpdateJobWith creating an existing hash", err, store.ErrConflict)
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("job changed by an UpdateJobWith whose token was refused (-want +got):\n%s", d)
	}
	if d := diff([]store.Event{firstEvent("j1")}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("event stored by an UpdateJobWith whose token was refused (-want +got):\n%s", d)
	}
	if got, err := s.TokenByHash(ctx, "h1"); err != nil || got.Kind != "owner" {
		t.Errorf("first token after a conflicting UpdateJobWith: %+v, %v; want it unchanged", got, err)
	}
}
