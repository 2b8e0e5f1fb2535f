package blob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// putBatch stores the contents in one committed batch.
func putBatch(t *testing.T, s *Store, contents ...[]byte) {
	t.Helper()
	b := s.NewBatch()
	defer b.Abort()
	for _, c := range contents {
		if _, err := b.Put(bytes.NewReader(c), sum(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

func readBlob(t *testing.T, s *Store, digest string) []byte {
	t.Helper()
	r, err := s.Open(digest)
	if err != nil {
		t.Fatalf("Open(%s): %v", digest, err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func listPacks(t *testing.T, s *Store) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.dir, packDir, "*"+packExt))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A batch packs blobs of any size into one pack file: one fsync for all.
func TestBatchPacksBlobsOfAnySize(t *testing.T) {
	s := newStore(t)
	small := []byte("small")
	large := bytes.Repeat([]byte("L"), packMax+1)
	edge := bytes.Repeat([]byte("e"), packMax)
	putBatch(t, s, small, large, edge)
	if n := len(listPacks(t, s)); n != 1 {
		t.Fatalf("%d packs, want 1", n)
	}
	for _, c := range [][]byte{small, large, edge} {
		if _, err := os.Stat(s.path(sum(c))); err == nil {
			t.Errorf("a blob of %d bytes is a file of its own, not packed", len(c))
		}
	}
	for _, c := range [][]byte{small, large, edge} {
		if got := readBlob(t, s, sum(c)); !bytes.Equal(got, c) {
			t.Errorf("blob of %d bytes reads back %d bytes", len(c), len(got))
		}
		if n, err := s.Size(sum(c)); err != nil || n != int64(len(c)) {
			t.Errorf("Size = %d, %v; want %d", n, err, len(c))
		}
	}
	if temps := listTemps(t, s); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
}

// A store opened again (a restarted server, or another process) sees the
// packed blobs.
func TestPackedBlobsSurviveReopen(t *testing.T) {
	s := newStore(t)
	var contents [][]byte
	for i := range 100 {
		contents = append(contents, fmt.Appendf(nil, "blob %d", i))
	}
	putBatch(t, s, contents...)
	other, err := Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, c := range contents {
		digests = append(digests, sum(c))
		if got := readBlob(t, other, sum(c)); !bytes.Equal(got, c) {
			t.Errorf("reopened store reads %q for %q", got, c)
		}
	}
	missing, err := other.Missing(append(digests, sum([]byte("never stored"))))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{sum([]byte("never stored"))}, missing); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
}

// A pack another process publishes after this store opened is found on
// the first miss.
func TestPacksOfAnotherProcessAreFound(t *testing.T) {
	s := newStore(t)
	other, err := Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	c := []byte("written by the other")
	if s.Has(sum(c)) {
		t.Fatal("Has before anyone stored it")
	}
	putBatch(t, other, c)
	if !s.Has(sum(c)) {
		t.Error("Has does not see another process's pack")
	}
	if got := readBlob(t, s, sum(c)); !bytes.Equal(got, c) {
		t.Errorf("read %q", got)
	}
}

// A server killed while writing a batch leaves a partial pack under its
// temporary name: nothing of it is visible, everything acknowledged before
// is, and the store opens.
func TestPartialPackIsNotVisible(t *testing.T) {
	s := newStore(t)
	acked := []byte("acknowledged")
	putBatch(t, s, acked)

	b := s.NewBatch()
	lost := []byte("in flight")
	if _, err := b.Put(bytes.NewReader(lost), sum(lost)); err != nil {
		t.Fatal(err)
	}
	if err := b.pack.w.Flush(); err != nil { // on disk, but no index or trailer: a crash
		t.Fatal(err)
	}
	again, err := Open(s.dir)
	if err != nil {
		t.Fatalf("Open after a crash mid-batch: %v", err)
	}
	if again.Has(sum(lost)) {
		t.Error("a blob of an unfinished batch is visible")
	}
	if got := readBlob(t, again, sum(acked)); !bytes.Equal(got, acked) {
		t.Errorf("acknowledged blob reads %q", got)
	}
	b.Abort()
}

// A published pack that is damaged (a disk fault, someone's truncation) is
// an error naming it, not silently missing blobs.
func TestDamagedPackIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
	}{
		{"truncated", func(d []byte) []byte { return d[:len(d)-10] }},
		{"index altered", func(d []byte) []byte {
			d = bytes.Clone(d)
			d[len(d)-packTrailer-1] ^= 1
			return d
		}},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			putBatch(t, s, []byte("a"), []byte("b"))
			pack := listPacks(t, s)[0]
			data, err := os.ReadFile(pack)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(pack, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(pack, tc.damage(data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Open(s.dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Base(pack)) {
				t.Errorf("Open of a store with a damaged pack: err = %v, want one naming %s", err, filepath.Base(pack))
			}
		})
	}
}

func TestConcurrentBatches(t *testing.T) {
	s := newStore(t)
	const batches, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	for i := range batches {
		wg.Go(func() {
			b := s.NewBatch()
			defer b.Abort()
			for j := range each {
				// Every batch also stores content the others store.
				for _, c := range [][]byte{fmt.Appendf(nil, "batch %d blob %d", i, j), fmt.Appendf(nil, "shared %d", j)} {
					if _, err := b.Put(bytes.NewReader(c), sum(c)); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- b.Commit()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	reopened, err := Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, reopened} {
		for i := range batches {
			for j := range each {
				for _, c := range [][]byte{fmt.Appendf(nil, "batch %d blob %d", i, j), fmt.Appendf(nil, "shared %d", j)} {
					if got := readBlob(t, st, sum(c)); !bytes.Equal(got, c) {
						t.Fatalf("read %q, want %q", got, c)
					}
				}
			}
		}
	}
}

// A packed blob is served with ranges like a file: the reader seeks within
// its own bytes, never into its neighbours in the pack.
func TestPackedBlobServesRanges(t *testing.T) {
	s := newStore(t)
	before, c, after := []byte("BEFORE"), []byte("0123456789"), []byte("AFTER")
	putBatch(t, s, before, c, after)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := s.Open(sum(c))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "", time.Time{}, f)
	}))
	defer srv.Close()
	for _, tc := range []struct{ rng, want string }{
		{"", "0123456789"},
		{"bytes=2-4", "234"},
		{"bytes=-3", "789"},
		{"bytes=7-", "789"},
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		if tc.rng != "" {
			req.Header.Set("Range", tc.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != tc.want {
			t.Errorf("Range %q: got %q, want %q", tc.rng, got, tc.want)
		}
	}
	f, err := s.Open(sum(c))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(c)) {
		t.Errorf("Size() = %d", f.Size())
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 8); n != 2 || !errors.Is(err, io.EOF) || string(buf[:n]) != "89" {
		t.Errorf("ReadAt past the end = %d %v %q, want 2 EOF \"89\"", n, err, buf[:n])
	}
}

// A bad blob in a batch stores nothing of the batch once it is aborted, as
// the server does.
func TestBatchWithBadBlobStoresNothing(t *testing.T) {
	s := newStore(t)
	b := s.NewBatch()
	good := []byte("good")
	if _, err := b.Put(bytes.NewReader(good), sum(good)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(strings.NewReader("bad"), sum(good)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
	b.Abort()
	if s.Has(sum(good)) || len(listPacks(t, s)) != 0 || len(listTemps(t, s)) != 0 {
		t.Error("an aborted batch left a blob, a pack or a temporary file")
	}
}
