// Command remoteinput measures what the node's download cache of remote
// inputs costs and saves (internal/fetch), against peers measured in the
// same run on a loopback HTTP server:
//
//   - cold: fetch.Cache.File of a file not cached (one GET whose body is
//     written to the cache and to the job's file at once) against a plain
//     GET written straight to a file (the physical limit of one download);
//
//   - warm: a cache hit (a conditional GET answered 304, then a copy out
//     of the cache) against that plain GET again: what the cache saves;
//
//   - folder: a blob folder of many small files through List Blobs, cold
//     (a GET each) and warm (the listing's ETags match the cache: no GET).
//
//     go run ./bench/remoteinput [-mib 128] [-files 500] [-n 3]
//
// It prints figures and ratios; it asserts nothing.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/fetch"
)

func main() {
	mib := flag.Int("mib", 128, "size of the one big file, MiB")
	files := flag.Int("files", 500, "files of the blob folder")
	n := flag.Int("n", 3, "repetitions (medians are printed)")
	flag.Parse()
	if err := run(*mib, *files, *n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(mib, files, n int) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-remote-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	big := make([]byte, mib<<20)
	rand.Read(big)
	blobs := map[string][]byte{}
	var names []string
	for i := range files {
		name := fmt.Sprintf("set/part-%04d.csv", i)
		blobs[name] = []byte(strings.Repeat(fmt.Sprintf("%d,", i), 256))
		names = append(names, name)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("comp") == "list" {
			fmt.Fprint(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>`)
			for _, nm := range names {
				fmt.Fprintf(w, `<Blob><Name>%s</Name><Properties><Content-Length>%d</Content-Length></Properties></Blob>`, nm, len(blobs[nm]))
			}
			fmt.Fprint(w, `</Blobs><NextMarker/></EnumerationResults>`)
			return
		}
		body := big
		if name, ok := strings.CutPrefix(r.URL.Path, "/c/"); ok {
			body = blobs[name]
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	}))
	defer srv.Close()
	ctx := context.Background()
	seq := 0
	dest := func() string { seq++; return filepath.Join(tmp, "jobs", fmt.Sprint(seq), "f") }

	plain := func() error {
		resp, err := http.Get(srv.URL + "/big")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		d := dest()
		os.MkdirAll(filepath.Dir(d), 0o755)
		f, err := os.Create(d)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, resp.Body)
		f.Close()
		return err
	}
	var tPlain, tCold, tWarm, tFolderCold, tFolderWarm []time.Duration
	for i := range n {
		cache := &fetch.Cache{Dir: filepath.Join(tmp, "cache", fmt.Sprint(i))}
		if d, err := timed(plain); err != nil {
			return err
		} else {
			tPlain = append(tPlain, d)
		}
		d, err := timed(func() error { _, err := cache.File(ctx, srv.URL+"/big", dest(), io.Discard, "bench"); return err })
		if err != nil {
			return err
		}
		tCold = append(tCold, d)
		d, err = timed(func() error {
			r, err := cache.File(ctx, srv.URL+"/big", dest(), io.Discard, "bench")
			if err == nil && !r.Hit {
				err = fmt.Errorf("the second fetch was not a cache hit")
			}
			return err
		})
		if err != nil {
			return err
		}
		tWarm = append(tWarm, d)
		for j, acc := range []*[]time.Duration{&tFolderCold, &tFolderWarm} {
			d, err := timed(func() error {
				_, err := cache.BlobFolder(ctx, srv.URL, "c", "set", filepath.Join(tmp, "folders", fmt.Sprint(i, j)), io.Discard, "bench")
				return err
			})
			if err != nil {
				return err
			}
			*acc = append(*acc, d)
		}
		os.RemoveAll(filepath.Join(tmp, "jobs"))
	}
	p, c, w := median(tPlain), median(tCold), median(tWarm)
	fmt.Printf("one %d MiB file, median of %d:\n", mib, n)
	fmt.Printf("  plain GET to a file (peer)    %8.1f ms  %6.0f MiB/s\n", ms(p), float64(mib)/p.Seconds())
	fmt.Printf("  cold, through the cache       %8.1f ms  %6.0f MiB/s  %.2fx the peer's time\n", ms(c), float64(mib)/c.Seconds(), c.Seconds()/p.Seconds())
	fmt.Printf("  warm, 304 + copy out          %8.1f ms  %6.0f MiB/s  %.2fx the peer's time\n", ms(w), float64(mib)/w.Seconds(), w.Seconds()/p.Seconds())
	fc, fw := median(tFolderCold), median(tFolderWarm)
	fmt.Printf("a blob folder of %d small files (List Blobs + a GET each):\n", files)
	fmt.Printf("  cold %8.1f ms (%.2f ms a file); warm (one List call, no GET) %8.1f ms (%.2f ms a file)\n", ms(fc), ms(fc)/float64(files), ms(fw), ms(fw)/float64(files))
	return nil
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
