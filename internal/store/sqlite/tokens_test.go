package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// A lookup that read the database before a DeleteTokens does not put the
// token it read into the cache after it.
func TestTokenCacheRefusesALookupOlderThanARevocation(t *testing.T) {
	var c tokenCache
	now := time.Now()
	tok := store.Token{Hash: "h", Kind: "run", Subject: "j"}
	_, gen, ok := c.get(tok.Hash, now) // the lookup begins: a miss
	if ok {
		t.Fatal("empty cache had the token")
	}
	c.revoke(tok.Kind, tok.Subject) // the delete commits meanwhile
	c.put(tok, gen, now)            // the lookup ends with what it read before
	if _, _, ok := c.get(tok.Hash, now); ok {
		t.Error("a token read before its revocation was cached after it")
	}
	_, gen, _ = c.get(tok.Hash, now)
	c.put(tok, gen, now)
	if _, _, ok := c.get(tok.Hash, now); !ok {
		t.Error("a token read after the last revocation was not cached")
	}
}

// A token deleted while other calls look it up is not found by any lookup
// that begins after DeleteTokens returned: a lookup that read the database
// before the delete must not put the token back into the cache.
func TestTokenRevokedDespiteConcurrentLookups(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	for i := 0; i < 50; i++ {
		tok := store.Token{Hash: fmt.Sprintf("h%d", i), Kind: "run", Subject: fmt.Sprintf("j%d", i), Attempt: 1}
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						_, _ = s.TokenByHash(ctx, tok.Hash)
					}
				}
			})
		}
		if err := s.DeleteTokens(ctx, tok.Kind, tok.Subject); err != nil {
			t.Fatal(err)
		}
		_, err := s.TokenByHash(ctx, tok.Hash)
		close(stop)
		wg.Wait()
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("round %d: TokenByHash after DeleteTokens: %v, want ErrNotFound", i, err)
		}
		if _, err := s.TokenByHash(ctx, tok.Hash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("round %d: TokenByHash after the lookups ended: %v, want ErrNotFound", i, err)
		}
	}
}

// A token is cached once it is made, by CreateToken or with a job's
// update, as a lookup reads it back: the first lookup reads no row. The
// proof is a delete by another store on the same file, whose cache is its
// own: this store still finds the token it made (and no other).
func TestMadeTokensAreCachedAsTheyReadBack(t *testing.T) {
	ctx := context.Background()
	s, other := openTwice(t)
	created := time.Date(2025, 3, 14, 15, 9, 26, 535897123, time.FixedZone("UTC+2", 2*3600))
	node := store.Token{Hash: "node-h", Kind: "node", Subject: "n1", Created: created}
	if err := s.CreateToken(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, store.Job{Name: "j", Status: "Queued", Created: created}, store.Event{Time: created, To: "Queued"}); err != nil {
		t.Fatal(err)
	}
	run := store.Token{Hash: "run-h", Kind: "run", Subject: "j", Attempt: 1, Created: created}
	if _, err := s.UpdateJobWith(ctx, "j", func(j *store.Job) (store.JobChange, error) {
		j.Status, j.Attempt = "Preparing", 1
		return store.JobChange{CreateToken: &run}, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []store.Token{node, run} {
		read, err := other.TokenByHash(ctx, tok.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.DeleteTokens(ctx, tok.Kind, tok.Subject); err != nil {
			t.Fatal(err)
		}
		got, err := s.TokenByHash(ctx, tok.Hash)
		if err != nil {
			t.Fatalf("%s token made by this store, deleted by another: %v; want it cached", tok.Kind, err)
		}
		if got != read {
			t.Errorf("%s token cached as %+v, read back as %+v", tok.Kind, got, read)
		}
	}
	if _, err := s.TokenByHash(ctx, "never-made"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a token never made: %v", err)
	}
}

// openTwice opens two stores on one new database file, each with its own
// caches, as two processes would; both are closed when the test ends.
func openTwice(t *testing.T) (s, other *Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ferry.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return s, other
}
