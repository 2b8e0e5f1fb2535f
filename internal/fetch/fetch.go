// Package fetch downloads the remote inputs of jobs on the node that runs
// them: http(s) files through a per-node cache keyed by URL and validator
// (ETag, Last-Modified), revalidated with a conditional request so an
// unchanged file costs one 304, and Azure blob folders through the List
// Blobs REST API, read anonymously.
//
// The cache is shared by the runners of a node, which may run at once:
// every file in it is written under a temporary name and renamed into
// place, and a data file, once named, never changes (a new validator is a
// new file), so a reader never sees half of one.
package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// secretQueryKeys are query parameters that carry a credential (a SAS
// token's signature, an API key): a URL is shown without their values.
var secretQueryKeys = []string{"sig", "signature", "token", "access_token", "key", "api_key", "apikey", "code", "secret", "password", "x-amz-signature", "x-goog-signature"}

// Redact is the URL as logs and errors show it: the values of parameters
// that carry credentials are replaced by "REDACTED".
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.RawQuery == "" {
		return raw
	}
	q := u.Query()
	changed := false
	for k := range q {
		if slices.Contains(secretQueryKeys, strings.ToLower(k)) {
			q[k] = []string{"REDACTED"}
			changed = true
		}
	}
	if !changed {
		return raw
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// StatusError is a fetch the server answered with a status other than
// success: the job's failure names the URL and the status.
type StatusError struct {
	URL    string
	Status int
	Text   string // the status line's text, e.g. "404 Not Found"
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %s", e.URL, e.Text)
}

// Cache is a node's cache of fetched files.
type Cache struct {
	Dir    string
	Client *http.Client // nil: a client with no overall timeout (files may be large)
	// ProgressEvery is how often a long download writes a progress line
	// (0: every 5 s).
	ProgressEvery time.Duration
	// MaxBytes bounds the cached files: after a download the least
	// recently used ones above it are removed (0: no bound).
	MaxBytes int64
}

// entry is what the cache keeps about one URL: the validator the server
// gave and the data file that holds the body it came with.
type entry struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	Size         int64  `json:"size"`
	File         string `json:"file"` // in the cache's directory
}

// Result says how a file was got.
type Result struct {
	Size int64
	// Hit is true when the cached copy was used: the server said it was
	// not modified (304).
	Hit bool
}

func (c *Cache) client() *http.Client {
	if c.Client != nil {
		return c.Client
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		ResponseHeaderTimeout: 2 * time.Minute, TLSHandshakeTimeout: 30 * time.Second}}
}

func key(url string) string {
	h := sha256.Sum256([]byte(url))
	return hex.EncodeToString(h[:16])
}

// File fetches url into the new file dest, from the cache when the
// server says the cached copy is current, and writes progress lines
// ("ferry: input NAME: ...") to logw, label naming what is fetched.
func (c *Cache) File(ctx context.Context, url, dest string, logw io.Writer, label string) (Result, error) {
	return c.fileKnown(ctx, url, "", dest, logw, label)
}

// fileKnown is File for a URL whose current ETag the caller knows (a List
// Blobs answer gives each blob's): a cached copy with that ETag is used
// without asking the server again.
func (c *Cache) fileKnown(ctx context.Context, url, etag, dest string, logw io.Writer, label string) (Result, error) {
	r, err := c.file(ctx, url, etag, dest, logw, label, true)
	if errors.Is(err, errCacheGone) {
		// Another runner of the node replaced the cached copy between
		// its answer and the copy: fetched again, unconditionally.
		return c.file(ctx, url, "", dest, logw, label, false)
	}
	return r, err
}

var errCacheGone = errors.New("the cached copy was replaced meanwhile")

func (c *Cache) file(ctx context.Context, url, known, dest string, logw io.Writer, label string, useCache bool) (Result, error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("the node's download cache: %w", err)
	}
	k := key(url)
	shown := Redact(url)
	metaPath := filepath.Join(c.Dir, k+".json")
	var cached *entry
	if raw, err := os.ReadFile(metaPath); err == nil && useCache {
		var e entry
		if json.Unmarshal(raw, &e) == nil && e.URL == url && e.File != "" && filepath.Base(e.File) == e.File {
			if fi, err := os.Stat(filepath.Join(c.Dir, e.File)); err == nil && fi.Size() == e.Size {
				cached = &e
			}
		}
	}
	hit := func(why string) (Result, error) {
		fmt.Fprintf(logw, "ferry: %s: %s: cache hit (%s, %s)\n", label, shown, why, sizeText(cached.Size))
		now := time.Now()
		os.Chtimes(metaPath, now, now) // recently used: the last to be pruned
		if err := copyFile(filepath.Join(c.Dir, cached.File), dest); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				os.Remove(dest) // a partial copy, if any
				return Result{}, errCacheGone
			}
			return Result{}, fmt.Errorf("%s from the node's download cache: %w", shown, err)
		}
		return Result{Size: cached.Size, Hit: true}, nil
	}
	if cached != nil && known != "" && strings.Trim(cached.ETag, `"`) == strings.Trim(known, `"`) {
		return hit("listed ETag unchanged")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Result{}, fmt.Errorf("GET %s: %w", shown, err)
	}
	if cached != nil {
		if cached.ETag != "" {
			req.Header.Set("If-None-Match", cached.ETag)
		}
		if cached.LastModified != "" {
			req.Header.Set("If-Modified-Since", cached.LastModified)
		}
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("GET %s: %w", shown, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && cached != nil {
		return hit("not modified")
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, &StatusError{URL: shown, Status: resp.StatusCode, Text: resp.Status}
	}
	e := entry{URL: url, ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	tmp, err := os.CreateTemp(c.Dir, k+".*.tmp")
	if err != nil {
		return Result{}, fmt.Errorf("the node's download cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	// The body goes to the cache and to the job's file at once: one read
	// of the network, no second read of the disk.
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		tmp.Close()
		return Result{}, err
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		tmp.Close()
		return Result{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(dest)
		}
	}()
	fmt.Fprintf(logw, "ferry: %s: downloading %s (%s)\n", label, shown, sizeText(resp.ContentLength))
	pw := &progress{w: logw, label: label, total: resp.ContentLength, every: c.ProgressEvery, last: time.Now()}
	if pw.every == 0 {
		pw.every = 5 * time.Second
	}
	n, err := io.Copy(io.MultiWriter(tmp, out, pw), resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("GET %s: reading the body: %w", shown, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return Result{}, fmt.Errorf("GET %s: the body ended after %d of %d bytes", shown, n, resp.ContentLength)
	}
	e.Size = n
	fmt.Fprintf(logw, "ferry: %s: downloaded %s\n", label, sizeText(n))
	ok = true
	if e.ETag == "" && e.LastModified == "" {
		// Nothing to revalidate with: not kept, fetched again next time.
		return Result{Size: n}, nil
	}
	vh := sha256.Sum256([]byte(e.ETag + "\x00" + e.LastModified + "\x00" + strconv.FormatInt(n, 10)))
	e.File = k + "-" + hex.EncodeToString(vh[:8])
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return Result{}, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(c.Dir, e.File)); err != nil {
		return Result{}, fmt.Errorf("the node's download cache: %w", err)
	}
	if err := writeAtomic(metaPath, e); err != nil {
		return Result{}, fmt.Errorf("the node's download cache: %w", err)
	}
	if cached != nil && cached.File != e.File {
		os.Remove(filepath.Join(c.Dir, cached.File)) // superseded; a runner copying it keeps its open file
	}
	c.prune(metaPath)
	return Result{Size: n}, nil
}

// prune removes the least recently used entries (by their metadata
// file's time) while the cache holds more than MaxBytes, keeping keep.
// A runner copying a removed file keeps its open file; one that reads
// the removed metadata next fetches the URL again.
func (c *Cache) prune(keep string) {
	if c.MaxBytes <= 0 {
		return
	}
	metas, err := filepath.Glob(filepath.Join(c.Dir, "*.json"))
	if err != nil {
		return
	}
	type item struct {
		meta, file string
		size       int64
		used       time.Time
	}
	var items []item
	var total int64
	for _, m := range metas {
		fi, err := os.Stat(m)
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var e entry
		if json.Unmarshal(raw, &e) != nil || e.File == "" || filepath.Base(e.File) != e.File {
			continue
		}
		items = append(items, item{meta: m, file: filepath.Join(c.Dir, e.File), size: e.Size, used: fi.ModTime()})
		total += e.Size
	}
	slices.SortFunc(items, func(a, b item) int { return a.used.Compare(b.used) })
	for _, it := range items {
		if total <= c.MaxBytes {
			return
		}
		if it.meta == keep {
			continue
		}
		os.Remove(it.meta)
		os.Remove(it.file)
		total -= it.size
	}
}

func writeAtomic(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// copyFile copies src into the new file dest (0644), making its folder.
func copyFile(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unwrapURLError drops url.Error's "Get \"URL\": " prefix, which the
// caller's message already carries.
func unwrapURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && strings.HasPrefix(err.Error(), "Get ") {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// progress writes a line about a download at most every `every`.
type progress struct {
	w     io.Writer
	label string
	total int64
	n     int64
	every time.Duration
	last  time.Time
}

func (p *progress) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if now := time.Now(); now.Sub(p.last) >= p.every {
		p.last = now
		if p.total > 0 {
			fmt.Fprintf(p.w, "ferry: %s: %s of %s (%d%%)\n", p.label, sizeText(p.n), sizeText(p.total), p.n*100/p.total)
		} else {
			fmt.Fprintf(p.w, "ferry: %s: %s\n", p.label, sizeText(p.n))
		}
	}
	return len(b), nil
}

func sizeText(n int64) string {
	switch {
	case n < 0:
		return "size unknown"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
