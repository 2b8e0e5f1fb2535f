package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fileServer serves files with ETags and answers If-None-Match, counting
// full and conditional requests.
type fileServer struct {
	mu          sync.Mutex
	files       map[string]string
	full, cond  int
	noValidator bool
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, ok := s.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	etag := fmt.Sprintf(`"%x"`, len(body)*31+int(body[0]))
	if r.Header.Get("If-None-Match") != "" {
		s.cond++
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	} else {
		s.full++
	}
	if !s.noValidator {
		w.Header().Set("ETag", etag)
	}
	fmt.Fprint(w, body)
}

func TestFileCachesAndRevalidates(t *testing.T) {
	fs := &fileServer{files: map[string]string{"/d/train.csv": "a,b\n1,2\n"}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	ctx := context.Background()
	url := srv.URL + "/d/train.csv"
	var log bytes.Buffer
	dir := t.TempDir()

	r, err := c.File(ctx, url, filepath.Join(dir, "1", "train.csv"), &log, "input x")
	if err != nil || r.Hit {
		t.Fatalf("first fetch: %+v, %v", r, err)
	}
	r, err = c.File(ctx, url, filepath.Join(dir, "2", "train.csv"), &log, "input x")
	if err != nil || !r.Hit {
		t.Fatalf("second fetch: %+v, %v; want a cache hit", r, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "2", "train.csv")); string(got) != "a,b\n1,2\n" {
		t.Errorf("cached copy = %q", got)
	}
	if fs.full != 1 || fs.cond != 1 {
		t.Errorf("server saw %d full and %d conditional requests, want 1 and 1", fs.full, fs.cond)
	}
	if !strings.Contains(log.String(), "cache hit (not modified") {
		t.Errorf("log does not say the cache was hit:\n%s", log.String())
	}

	// A changed file is fetched again and replaces the cached one.
	fs.mu.Lock()
	fs.files["/d/train.csv"] = "x,y\n3,4,5\n"
	fs.mu.Unlock()
	r, err = c.File(ctx, url, filepath.Join(dir, "3", "train.csv"), &log, "input x")
	if err != nil || r.Hit {
		t.Fatalf("changed fetch: %+v, %v; want a download", r, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "3", "train.csv")); string(got) != "x,y\n3,4,5\n" {
		t.Errorf("changed copy = %q", got)
	}
}

func TestFileWithoutValidatorIsNotCached(t *testing.T) {
	fs := &fileServer{files: map[string]string{"/f": "data"}, noValidator: true}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	dir := t.TempDir()
	for i := range 2 {
		r, err := c.File(context.Background(), srv.URL+"/f", filepath.Join(dir, fmt.Sprint(i), "f"), &bytes.Buffer{}, "input f")
		if err != nil || r.Hit || r.Size != 4 {
			t.Fatalf("fetch %d: %+v, %v", i, r, err)
		}
	}
	if fs.full != 2 {
		t.Errorf("server saw %d full requests, want 2", fs.full)
	}
}

func TestFileNotFound(t *testing.T) {
	srv := httptest.NewServer(&fileServer{files: map[string]string{}})
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	_, err := c.File(context.Background(), srv.URL+"/missing.csv", filepath.Join(t.TempDir(), "x"), &bytes.Buffer{}, "input x")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 404 {
		t.Fatalf("err = %v, want a StatusError 404", err)
	}
	if want := "GET " + srv.URL + "/missing.csv: HTTP 404 Not Found"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// blobServer answers List Blobs (two pages) and serves the blobs, as
// Azure's blob service does for a public container.
func blobServer(t *testing.T, container string, blobs map[string]string) *httptest.Server {
	t.Helper()
	srv, _ := countingBlobServer(t, container, blobs)
	return srv
}

// countingBlobServer is blobServer with a count of the blob GETs it
// answered (lists not counted); read it after the requests.
func countingBlobServer(t *testing.T, container string, blobs map[string]string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	gets := new(atomic.Int32)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("comp") == "list" && q.Get("restype") == "container" {
			if r.URL.Path != "/"+container {
				w.WriteHeader(404)
				fmt.Fprint(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>ContainerNotFound</Code></Error>`)
				return
			}
			var names []string
			for n := range blobs {
				if strings.HasPrefix(n, q.Get("prefix")) {
					names = append(names, n)
				}
			}
			// sorted, split in two pages by the marker
			slices.Sort(names)
			half := (len(names) + 1) / 2
			page, next := names[:half], "page2"
			if q.Get("marker") == "page2" {
				page, next = names[half:], ""
			}
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://x/" ContainerName="%s"><Prefix>%s</Prefix><Blobs>`, container, q.Get("prefix"))
			for _, n := range page {
				fmt.Fprintf(w, `<Blob><Name>%s</Name><Properties><Last-Modified>Mon, 02 Jan 2026 10:00:00 GMT</Last-Modified><Etag>0x8D-%s</Etag><Content-Length>%d</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>`, n, n, len(blobs[n]))
			}
			fmt.Fprintf(w, `</Blobs><NextMarker>%s</NextMarker></EnumerationResults>`, next)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/"+container+"/")
		body, ok := blobs[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		gets.Add(1)
		w.Header().Set("ETag", `"0x8D-`+name+`"`)
		if r.Header.Get("If-None-Match") == `"0x8D-`+name+`"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, body)
	})), gets
}

func TestBlobFolder(t *testing.T) {
	srv, gets := countingBlobServer(t, "data", map[string]string{
		"mnist/train.csv":     "1,2\n",
		"mnist/sub/label.txt": "seven\n",
		"mnist/sub/":          "",
		"other/x.csv":         "no\n",
	})
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	dest := t.TempDir()
	var log bytes.Buffer
	res, err := c.BlobFolder(context.Background(), srv.URL, "data", "mnist", dest, &log, "input m")
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || res.Hits != 0 {
		t.Errorf("result %+v, want 2 files, no hits", res)
	}
	if got, _ := os.ReadFile(filepath.Join(dest, "sub", "label.txt")); string(got) != "seven\n" {
		t.Errorf("sub/label.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dest, "x.csv")); err == nil {
		t.Error("a blob outside the prefix was fetched")
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("the first fetch made %d blob GETs, want 2", n)
	}
	res, err = c.BlobFolder(context.Background(), srv.URL, "data", "mnist", t.TempDir(), &log, "input m")
	if err != nil || res.Hits != 2 {
		t.Errorf("second fetch: %+v, %v; want 2 hits", res, err)
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("the second fetch made %d more blob GETs, want none: the listing's ETags say the cached blobs are current", n-2)
	}
	if !strings.Contains(log.String(), "2 files (") {
		t.Errorf("log:\n%s", log.String())
	}
	_, err = c.BlobFolder(context.Background(), srv.URL, "nope", "", t.TempDir(), &log, "input m")
	if se := (*StatusError)(nil); !errors.As(err, &se) || se.Status != 404 {
		t.Errorf("missing container: %v, want a 404", err)
	}
}

func TestBlobFolderRefusesEscapes(t *testing.T) {
	srv := blobServer(t, "data", map[string]string{"d/../../evil": "x"})
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	_, err := c.BlobFolder(context.Background(), srv.URL, "data", "d", t.TempDir(), &bytes.Buffer{}, "input m")
	if err == nil || !strings.Contains(err.Error(), "outside the input's folder") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParseList: any answer is read or refused without a panic.
func FuzzParseList(f *testing.F) {
	f.Add(`<EnumerationResults><Blobs><Blob><Name>a</Name><Properties><Content-Length>3</Content-Length></Properties></Blob></Blobs><NextMarker>m</NextMarker></EnumerationResults>`)
	f.Add(`<Error/>`)
	f.Fuzz(func(t *testing.T, s string) {
		blobs, _, err := ParseList(strings.NewReader(s))
		if err != nil && blobs != nil {
			t.Fatalf("blobs with an error")
		}
	})
}

// The cache keeps the most recently used files within MaxBytes.
func TestCachePrunesLeastRecentlyUsed(t *testing.T) {
	fs := &fileServer{files: map[string]string{"/a": "aaaa", "/b": "bbbb", "/c": "cccc"}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	c := &Cache{Dir: t.TempDir(), MaxBytes: 8}
	dir := t.TempDir()
	get := func(p string, i int) Result {
		t.Helper()
		r, err := c.File(context.Background(), srv.URL+p, filepath.Join(dir, fmt.Sprint(i), "f"), &bytes.Buffer{}, "input")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	get("/a", 1)
	get("/b", 2)
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(c.Dir, key(srv.URL+"/a")+".json"), past, past); err != nil {
		t.Fatal(err)
	}
	get("/c", 3) // 12 bytes > 8: /a, the least recently used, goes
	if r := get("/b", 4); !r.Hit {
		t.Error("/b was pruned, want it kept")
	}
	if r := get("/a", 5); r.Hit {
		t.Error("/a was kept, want it pruned")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://a.blob.core.windows.net/c/x.csv?sv=2022&sig=SECRET%2B&se=1": "https://a.blob.core.windows.net/c/x.csv?se=1&sig=REDACTED&sv=2022",
		"https://example.com/x?download=1":                                   "https://example.com/x?download=1",
		"https://example.com/x":                                              "https://example.com/x",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	// A failed fetch names the URL without its signature.
	srv := httptest.NewServer(&fileServer{files: map[string]string{}})
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	_, err := c.File(context.Background(), srv.URL+"/x?sig=SECRET", filepath.Join(t.TempDir(), "x"), &bytes.Buffer{}, "input x")
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "sig=REDACTED") {
		t.Errorf("err = %v", err)
	}
}

// A blob that is listed but cannot be fetched fails the folder, naming it.
func TestBlobFolderFailsOnABlob(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("comp") == "list" {
			fmt.Fprint(w, `<EnumerationResults><Blobs>`)
			for i := range 20 {
				fmt.Fprintf(w, `<Blob><Name>d/f%02d</Name><Properties><Content-Length>1</Content-Length></Properties></Blob>`, i)
			}
			fmt.Fprint(w, `</Blobs><NextMarker/></EnumerationResults>`)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/f13") {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		fmt.Fprint(w, "x")
	}))
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	_, err := c.BlobFolder(context.Background(), srv.URL, "data", "d", t.TempDir(), &bytes.Buffer{}, "input d")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 403 || !strings.HasSuffix(se.URL, "/data/d/f13") {
		t.Fatalf("err = %v, want the 403 of d/f13", err)
	}
}
