package blob

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

func TestBatchInstallsOnlyOnCommit(t *testing.T) {
	s := newStore(t)
	held := []byte("already held")
	if _, _, err := s.Put(bytes.NewReader(held), ""); err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	contents := [][]byte{[]byte("one"), []byte("two"), []byte("one"), held, {}}
	for _, c := range contents {
		n, err := b.Put(bytes.NewReader(c), sum(c))
		if err != nil || n != int64(len(c)) {
			t.Fatalf("Put(%q) = %d, %v", c, n, err)
		}
	}
	if _, err := b.Put(bytes.NewReader([]byte("liar")), sum([]byte("truth"))); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("mismatched Put err = %v, want ErrDigestMismatch", err)
	}
	if _, err := b.Put(bytes.NewReader(held[:3]), sum(held)); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("mismatched Put of held content err = %v, want ErrDigestMismatch", err)
	}
	if s.Has(sum([]byte("one"))) {
		t.Error("a blob is visible before Commit")
	}
	if n := len(listTemps(t, s)); n != 1 {
		t.Errorf("%d temporary files before Commit, want 1 (the pack of one, two and empty)", n)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, c := range contents {
		f, err := s.Open(sum(c))
		if err != nil {
			t.Fatalf("Open(%q): %v", c, err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, c) {
			t.Errorf("blob %q holds %q", c, got)
		}
	}
	if s.Has(sum([]byte("liar"))) || s.Has(sum([]byte("truth"))) {
		t.Error("mismatched content was stored")
	}
	if temps := listTemps(t, s); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
}

func TestBatchAbortLeavesNothing(t *testing.T) {
	s := newStore(t)
	b := s.NewBatch()
	if _, err := b.Put(bytes.NewReader([]byte("x")), sum([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(bytes.NewReader(nil), "NOT-A-DIGEST"); !errors.Is(err, ErrInvalidDigest) {
		t.Errorf("invalid digest err = %v", err)
	}
	b.Abort()
	if s.Has(sum([]byte("x"))) || len(listTemps(t, s)) != 0 {
		t.Error("an aborted batch left a blob or a temporary file")
	}
}

// TestBatchAddHashesWhatItStores checks Add of content whose digest the
// caller does not know: small and large (past packMax) blobs, twice each
// and once already held, come back under their SHA-256, visible only after
// Commit and each stored once.
func TestBatchAddHashesWhatItStores(t *testing.T) {
	s := newStore(t)
	held := []byte("already held")
	if _, _, err := s.Put(bytes.NewReader(held), ""); err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("L"), packMax+10)
	contents := [][]byte{[]byte("one"), {}, large, []byte("one"), large, held}
	b := s.NewBatch()
	for _, c := range contents {
		d, n, err := b.Add(bytes.NewReader(c))
		if err != nil || d != sum(c) || n != int64(len(c)) {
			t.Fatalf("Add(%d bytes) = %s, %d, %v; want %s", len(c), d, n, err, sum(c))
		}
	}
	if s.Has(sum([]byte("one"))) || s.Has(sum(large)) {
		t.Error("a blob is visible before Commit")
	}
	if n := len(listTemps(t, s)); n != 1 {
		t.Errorf("%d temporary files before Commit, want 1 (the pack)", n)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, c := range contents {
		f, err := s.Open(sum(c))
		if err != nil {
			t.Fatalf("Open(%d bytes): %v", len(c), err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, c) {
			t.Errorf("blob of %d bytes holds %d other bytes", len(c), len(got))
		}
	}
	if temps := listTemps(t, s); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
	// The large blob, added twice, is in the pack once.
	packs := listPacks(t, s)
	if len(packs) != 1 {
		t.Fatalf("%d packs, want 1", len(packs))
	}
	if fi, err := os.Stat(packs[0]); err != nil || fi.Size() > int64(2*len(large)) {
		t.Errorf("the pack holds %d bytes (%v), want the large blob once (%d)", fi.Size(), err, len(large))
	}
}

// A large blob that is refused (its content does not hash to its name) or
// whose reading fails is cut off the pack again: the batch goes on, and
// what it commits is whole.
func TestBatchCutsOffARefusedLargeBlob(t *testing.T) {
	s := newStore(t)
	large := bytes.Repeat([]byte("L"), packMax+10)
	other := bytes.Repeat([]byte("O"), packMax+20)
	b := s.NewBatch()
	if _, err := b.Put(bytes.NewReader(large), sum(other)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Put of a large blob under another digest: err = %v", err)
	}
	broken := io.MultiReader(bytes.NewReader(other[:packMax+5]), iotest.ErrReader(errors.New("connection reset")))
	if _, err := b.Put(broken, sum(other)); err == nil {
		t.Fatal("Put of a blob whose reading fails: no error")
	}
	if _, err := b.Put(bytes.NewReader(other), sum(other)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, s, sum(other)); !bytes.Equal(got, other) {
		t.Errorf("the blob after the refused ones reads back %d bytes", len(got))
	}
	if s.Has(sum(large)) {
		t.Error("the refused blob is stored")
	}
	packs := listPacks(t, s)
	if fi, err := os.Stat(packs[0]); err != nil || fi.Size() > int64(len(other)+1024) {
		t.Errorf("the pack holds %d bytes (%v), want the good blob alone (%d)", fi.Size(), err, len(other))
	}
}
