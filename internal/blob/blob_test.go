package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listTemps returns leftover in-flight files in the store directory.
func listTemps(t *testing.T, s *Store) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.dir, tempPattern))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestValidDigest(t *testing.T) {
	good := sum([]byte("x"))
	tests := []struct {
		d    string
		want bool
	}{
		{good, true},
		{strings.Repeat("0", 64), true},
		{"", false},
		{good[:63], false},
		{good + "0", false},
		{strings.ToUpper(good), false},
		{strings.Repeat("g", 64), false},
		{"../" + good[3:], false},
		{strings.Repeat("a", 62) + "/b", false},
	}
	for _, tt := range tests {
		if got := ValidDigest(tt.d); got != tt.want {
			t.Errorf("ValidDigest(%q) = %v, want %v", tt.d, got, tt.want)
		}
	}
}

func TestPutOpenRoundTrip(t *testing.T) {
	s := newStore(t)
	data := []byte("hello, ferry")
	d, n, err := s.Put(bytes.NewReader(data), "")
	if err != nil {
		t.Fatal(err)
	}
	if d != sum(data) || n != int64(len(data)) {
		t.Fatalf("Put = %s, %d; want %s, %d", d, n, sum(data), len(data))
	}
	if _, err := os.Stat(filepath.Join(s.dir, d[:2], d)); err != nil {
		t.Errorf("blob not at fan-out path: %v", err)
	}
	if !s.Has(d) {
		t.Error("Has = false after Put")
	}
	f, err := s.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(data, got); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
	if size, err := s.Size(d); err != nil || size != int64(len(data)) {
		t.Errorf("Size = %d, %v; want %d", size, err, len(data))
	}
	// Putting it again, with the right digest announced, is fine.
	if d2, _, err := s.Put(bytes.NewReader(data), d); err != nil || d2 != d {
		t.Errorf("second Put = %s, %v", d2, err)
	}
	if tmps := listTemps(t, s); len(tmps) != 0 {
		t.Errorf("leftover temp files: %v", tmps)
	}
}

func TestPutEmpty(t *testing.T) {
	s := newStore(t)
	d, n, err := s.Put(strings.NewReader(""), "")
	if err != nil || n != 0 || d != sum(nil) {
		t.Fatalf("Put(empty) = %s, %d, %v", d, n, err)
	}
}

func TestPutDigestMismatch(t *testing.T) {
	s := newStore(t)
	want := sum([]byte("expected"))
	_, _, err := s.Put(strings.NewReader("something else"), want)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Put err = %v, want ErrDigestMismatch", err)
	}
	if s.Has(want) || s.Has(sum([]byte("something else"))) {
		t.Error("mismatched content was stored")
	}
	if tmps := listTemps(t, s); len(tmps) != 0 {
		t.Errorf("leftover temp files: %v", tmps)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("connection reset")
	}
	r.n--
	p[0] = 'x'
	return 1, nil
}

func TestPutReadError(t *testing.T) {
	s := newStore(t)
	if _, _, err := s.Put(&failingReader{n: 3}, ""); err == nil {
		t.Fatal("Put succeeded on a failing reader")
	}
	if tmps := listTemps(t, s); len(tmps) != 0 {
		t.Errorf("leftover temp files: %v", tmps)
	}
}

func TestInvalidDigests(t *testing.T) {
	s := newStore(t)
	// A file planted outside the fan-out layout must never be reachable.
	if err := os.WriteFile(filepath.Join(s.dir, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", "secret", "../blobs/secret", strings.Repeat("A", 64), "ab/../secret"} {
		if s.Has(d) {
			t.Errorf("Has(%q) = true", d)
		}
		if _, err := s.Open(d); !errors.Is(err, ErrInvalidDigest) {
			t.Errorf("Open(%q) err = %v, want ErrInvalidDigest", d, err)
		}
		if _, err := s.Size(d); !errors.Is(err, ErrInvalidDigest) {
			t.Errorf("Size(%q) err = %v, want ErrInvalidDigest", d, err)
		}
		if d != "" {
			if _, _, err := s.Put(strings.NewReader("x"), d); !errors.Is(err, ErrInvalidDigest) {
				t.Errorf("Put(want=%q) err = %v, want ErrInvalidDigest", d, err)
			}
		}
		if _, err := s.Missing([]string{sum(nil), d}); !errors.Is(err, ErrInvalidDigest) {
			t.Errorf("Missing(%q) err = %v, want ErrInvalidDigest", d, err)
		}
	}
}

func TestNotFound(t *testing.T) {
	s := newStore(t)
	d := sum([]byte("absent"))
	if s.Has(d) {
		t.Error("Has = true on empty store")
	}
	if _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open err = %v, want ErrNotFound", err)
	}
	if _, err := s.Size(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Size err = %v, want ErrNotFound", err)
	}
}

func TestMissing(t *testing.T) {
	s := newStore(t)
	a, _, err := s.Put(strings.NewReader("a"), "")
	if err != nil {
		t.Fatal(err)
	}
	b, c := sum([]byte("b")), sum([]byte("c"))
	got, err := s.Missing([]string{c, a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{c, b}, got); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
	got, err = s.Missing(nil)
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("Missing(nil) = %#v, %v; want empty, non-nil", got, err)
	}
}

func TestPutFile(t *testing.T) {
	s := newStore(t)
	p := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789"), 100000)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d, n, err := s.PutFile(p)
	if err != nil || d != sum(data) || n != int64(len(data)) {
		t.Fatalf("PutFile = %s, %d, %v", d, n, err)
	}
	if _, _, err := s.PutFile(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("PutFile of an absent file succeeded")
	}
}

func TestConcurrentPutSameContent(t *testing.T) {
	s := newStore(t)
	data := bytes.Repeat([]byte("concurrent blob "), 1<<16)
	want := sum(data)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			d, size, err := s.Put(bytes.NewReader(data), want)
			if err == nil && (d != want || size != int64(len(data))) {
				err = errors.New("wrong digest or size")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	f, err := s.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if sum(got) != want {
		t.Error("stored content does not hash to its digest")
	}
	if tmps := listTemps(t, s); len(tmps) != 0 {
		t.Errorf("leftover temp files: %v", tmps)
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, want[:2]))
	if err != nil || len(entries) != 1 {
		t.Errorf("fan-out folder holds %d entries (%v), want 1", len(entries), err)
	}
}
