package fetch

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// folderWorkers is how many blobs of a folder are fetched at once.
const folderWorkers = 8

// MaxBlobs bounds the files of one blob folder input.
const MaxBlobs = 200_000

// maxListPage bounds one List Blobs answer (5,000 entries are well under).
const maxListPage = 32 << 20

// ErrEmptyFolder is a blob folder with no files under it.
var ErrEmptyFolder = errors.New("no files under this folder")

// Blob is one blob of a listing.
type Blob struct {
	Name string // the blob's full name in its container
	Size int64
	ETag string // as the listing gives it (unquoted)
}

// listResult is the part of Azure's List Blobs answer Ferry reads
// (https://learn.microsoft.com/rest/api/storageservices/list-blobs).
type listResult struct {
	XMLName xml.Name `xml:"EnumerationResults"`
	Blobs   []struct {
		Name       string `xml:"Name"`
		Properties struct {
			ContentLength int64  `xml:"Content-Length"`
			Etag          string `xml:"Etag"`
		} `xml:"Properties"`
	} `xml:"Blobs>Blob"`
	NextMarker string `xml:"NextMarker"`
}

// ParseList reads one page of a List Blobs answer: its blobs and the
// marker of the next page ("" on the last).
func ParseList(r io.Reader) ([]Blob, string, error) {
	var lr listResult
	d := xml.NewDecoder(r)
	if err := d.Decode(&lr); err != nil {
		return nil, "", fmt.Errorf("the List Blobs answer is not its XML: %w", err)
	}
	out := make([]Blob, 0, len(lr.Blobs))
	for _, b := range lr.Blobs {
		out = append(out, Blob{Name: b.Name, Size: b.Properties.ContentLength, ETag: b.Properties.Etag})
	}
	return out, strings.TrimSpace(lr.NextMarker), nil
}

// ListBlobs lists the blobs whose names start with prefix in container
// of the blob service at base, page by page, anonymously.
func (c *Cache) ListBlobs(ctx context.Context, base, container, prefix string) ([]Blob, error) {
	var all []Blob
	marker := ""
	for page := 0; ; page++ {
		q := url.Values{"restype": {"container"}, "comp": {"list"}}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if marker != "" {
			q.Set("marker", marker)
		}
		u := base + "/" + url.PathEscape(container) + "?" + q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		req.Header.Set("x-ms-version", "2021-08-06")
		resp, err := c.client().Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, unwrapURLError(err))
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, &StatusError{URL: u, Status: resp.StatusCode, Text: resp.Status}
		}
		blobs, next, err := ParseList(io.LimitReader(resp.Body, maxListPage))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		all = append(all, blobs...)
		if len(all) > MaxBlobs {
			return nil, fmt.Errorf("%s/%s/%s holds more than %d files; name a smaller folder", base, container, prefix, MaxBlobs)
		}
		if next == "" {
			return all, nil
		}
		if next == marker {
			return nil, fmt.Errorf("GET %s: the listing gave the same next marker twice", u)
		}
		marker = next
	}
}

// FolderResult says how a blob folder was got.
type FolderResult struct {
	Files, Hits int
	Bytes       int64
}

// BlobFolder fetches every blob under path (a folder; "" is the whole
// container) of container at base into the folder dest, each through the
// cache, and writes a line about the whole to logw. A blob whose name
// would leave dest is refused.
func (c *Cache) BlobFolder(ctx context.Context, base, container, path, dest string, logw io.Writer, label string) (FolderResult, error) {
	prefix := ""
	if path != "" {
		prefix = path + "/"
	}
	shown := base + "/" + container + "/" + prefix
	blobs, err := c.ListBlobs(ctx, base, container, prefix)
	if err != nil {
		return FolderResult{}, err
	}
	type job struct{ url, etag, dest string }
	var jobs []job
	for _, b := range blobs {
		rel := strings.TrimPrefix(b.Name, prefix)
		if strings.HasSuffix(rel, "/") || rel == "" {
			continue // a folder's marker (ADLS Gen2), not a file
		}
		if !filepath.IsLocal(rel) || strings.Contains(rel, "\\") {
			return FolderResult{}, fmt.Errorf("%s: the blob %q would be written outside the input's folder", shown, b.Name)
		}
		u := base + "/" + url.PathEscape(container) + "/" + spec.EscapeURLPath(b.Name)
		jobs = append(jobs, job{url: u, etag: b.ETag, dest: filepath.Join(dest, filepath.FromSlash(rel))})
	}
	// Several blobs at once: a folder of small files is bound by round
	// trips, not bandwidth. The first error stops the rest.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu   sync.Mutex
		res  FolderResult
		wg   sync.WaitGroup
		next = make(chan job)
		last = time.Now()
	)
	for range min(folderWorkers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				// The listing's ETag tells a cached blob current without
				// a request of its own: a warm folder costs one List call.
				r, err := c.fileKnown(ctx, j.url, j.etag, j.dest, io.Discard, label)
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				res.Files++
				res.Bytes += r.Size
				if r.Hit {
					res.Hits++
				}
				if time.Since(last) >= 5*time.Second {
					last = time.Now()
					fmt.Fprintf(logw, "ferry: %s: %d of %d files (%s)\n", label, res.Files, len(jobs), sizeText(res.Bytes))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	if res.Files == 0 {
		return res, fmt.Errorf("%s: %w (List Blobs found none with prefix %q)", shown, ErrEmptyFolder, prefix)
	}
	fmt.Fprintf(logw, "ferry: %s: %d files (%s) from %s: %d from the cache, %d downloaded\n",
		label, res.Files, sizeText(res.Bytes), shown, res.Hits, res.Files-res.Hits)
	return res, nil
}
