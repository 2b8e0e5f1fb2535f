package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

// Missing returns which digests the server lacks.
func (c *Client) Missing(ctx context.Context, digests []string) ([]string, error) {
	var out apitypes.DigestList
	err := c.do(ctx, "POST", "/v1/blobs/missing", apitypes.DigestList{Digests: digests}, &out)
	return out.Digests, err
}

// PutBlob uploads the file at path as the blob digest.
func (c *Client) PutBlob(ctx context.Context, digest, path string, progress func(int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var body io.Reader = f
	if progress != nil {
		body = &progressReader{r: f, fn: progress}
	}
	resp, err := c.request(ctx, "PUT", "/v1/blobs/"+digest, body, "application/octet-stream")
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return resp.Body.Close()
}

type progressReader struct {
	r  io.Reader
	fn func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.fn(int64(n))
	return n, err
}

// GetBlob downloads a blob.
func (c *Client) GetBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, "GET", "/v1/blobs/"+digest, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// CreateSnapshot stores a manifest and returns its id.
func (c *Client) CreateSnapshot(ctx context.Context, m *snapshot.Manifest) (string, error) {
	var out apitypes.SnapshotID
	return out.ID, c.do(ctx, "POST", "/v1/snapshots", m, &out)
}

// GetSnapshot fetches a manifest.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*snapshot.Manifest, error) {
	var out snapshot.Manifest
	return &out, c.do(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id), nil, &out)
}

// UploadStats says what an Upload sent.
type UploadStats struct {
	Files    int   // files in the snapshot
	Uploaded int   // distinct blobs the server lacked and got
	Bytes    int64 // bytes sent
}

// Batching of blobs: blobs go many to a tar stream, up to batchBytes or
// batchBlobs a request (a larger blob alone), so that a tree of many files
// costs a few requests and disk syncs (the server packs a batch into one
// file) instead of one of each per file.
const (
	batchBytes    = 32 << 20
	batchBlobs    = 20_000
	missingChunk  = 100_000 // digests per Missing call: its JSON stays well under the server's body limit
	uploadWorkers = 4       // requests in flight at once
)

// UploadData sends the files of m the server lacks (files maps a digest
// to a local path; data holds the content of some of them by digest,
// snapshot.OutputBuild.Data, sent from memory, not read again) and stores
// the manifest; it returns the snapshot id and what it sent. Files travel
// many to a request. progress, if not nil, hears of every byte sent; it
// may be called from several goroutines. It is what UploadOutputs falls
// back to on a server without snapshot streams; a folder to snapshot
// goes by UploadTree.
func (c *Client) UploadData(ctx context.Context, m *snapshot.Manifest, files map[string]string, data map[string][]byte, progress func(int64)) (string, UploadStats, error) {
	stats := UploadStats{Files: len(m.Files)}
	digests := m.Digests()
	var missing []string
	for len(digests) > 0 {
		chunk := digests[:min(len(digests), missingChunk)]
		digests = digests[len(chunk):]
		miss, err := c.Missing(ctx, chunk)
		if err != nil {
			return "", stats, err
		}
		missing = append(missing, miss...)
	}
	sizes := make(map[string]int64, len(m.Files))
	for _, f := range m.Files {
		sizes[f.Digest] = f.Size
	}
	var jobs []uploadJob
	var bt batcher
	for _, d := range missing {
		path, ok := files[d]
		if !ok {
			return "", stats, fmt.Errorf("no local file for blob %s", d)
		}
		if full := bt.add(blobFile{digest: d, path: path, size: sizes[d], data: data[d]}); full != nil {
			jobs = append(jobs, full)
		}
	}
	if rest := bt.rest(); rest != nil {
		jobs = append(jobs, rest)
	}
	if err := c.runUploads(ctx, jobs, progress); err != nil {
		return "", stats, err
	}
	stats.Uploaded = len(missing)
	for _, d := range missing {
		stats.Bytes += sizes[d]
	}
	id, err := c.CreateSnapshot(ctx, m)
	return id, stats, err
}

// UploadOutputs sends the files of an output plan as one snapshot stream
// (snapshot.OutputPlan.WriteStream), reading each file as the request
// carries the ones before it, and returns the snapshot id the server
// stored and what was sent and left out (the plan's skipped entries and
// those found while reading). The client hashes nothing: the server
// does. A server without the stream gets the plan hashed and uploaded the
// batched way (UploadData).
func (c *Client) UploadOutputs(ctx context.Context, p snapshot.OutputSource, progress func(int64)) (string, snapshot.OutputSent, error) {
	pr, pw := io.Pipe()
	sentc := make(chan snapshot.OutputSent, 1)
	var werr error
	go func() {
		sent, err := p.WriteStream(pw, progress)
		werr = err
		sentc <- sent
		pw.CloseWithError(err)
	}()
	resp, err := c.request(ctx, "POST", "/v1/snapshots/stream", pr, snapshot.StreamContentType)
	pr.CloseWithError(errors.New("request ended"))
	sent := <-sentc
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusMethodNotAllowed {
		ob, err := p.Build()
		if err != nil {
			return "", snapshot.OutputSent{}, err
		}
		id, stats, err := c.UploadData(ctx, ob.Manifest, ob.Files, ob.Data, progress)
		return id, snapshot.OutputSent{Files: stats.Files, Bytes: ob.Manifest.TotalSize(), Skipped: ob.Skipped, SkippedMore: ob.SkippedMore}, err
	}
	if err != nil {
		if werr != nil && !errors.Is(err, werr) {
			// Say what went wrong here, not only how the request ended.
			err = fmt.Errorf("%w (the request: %w)", werr, err)
		}
		return "", sent, fmt.Errorf("upload %d files: %w", p.Len(), err)
	}
	defer resp.Body.Close()
	var out apitypes.StreamedSnapshot
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", sent, fmt.Errorf("upload %d files: the reply: %w", p.Len(), err)
	}
	if out.Files != sent.Files || out.Bytes != sent.Bytes {
		return "", sent, fmt.Errorf("upload %d files: the server stored %d files of %d bytes, but %d of %d were sent", p.Len(), out.Files, out.Bytes, sent.Files, sent.Bytes)
	}
	return out.ID, sent, nil
}

// blobFile is a local file to upload as a blob, and its content when it
// is in memory already.
type blobFile struct {
	digest, path string
	size         int64
	data         []byte
}

// uploadJob is one request's worth of blobs.
type uploadJob []blobFile

// batcher groups blobs into upload jobs of up to batchBytes or batchBlobs
// (a larger blob alone).
type batcher struct {
	batch uploadJob
	size  int64
}

// add adds b, and returns the batch to send first when b does not fit it.
func (bt *batcher) add(b blobFile) uploadJob {
	var full uploadJob
	if len(bt.batch) > 0 && (len(bt.batch) >= batchBlobs || bt.size+b.size > batchBytes) {
		full, bt.batch, bt.size = bt.batch, nil, 0
	}
	bt.batch = append(bt.batch, b)
	bt.size += b.size
	return full
}

// rest returns the batch not sent yet, if any.
func (bt *batcher) rest() uploadJob {
	j := bt.batch
	bt.batch, bt.size = nil, 0
	return j
}

// runUploads sends the jobs, uploadWorkers at a time, and returns the first
// error.
func (c *Client) runUploads(ctx context.Context, jobs []uploadJob, progress func(int64)) error {
	u := c.newUploader(ctx, progress)
	for _, j := range jobs {
		if u.send(j) != nil {
			break
		}
	}
	return u.wait()
}

// uploader sends upload jobs as they come, uploadWorkers requests at a
// time; the first error stops it.
type uploader struct {
	ctx    context.Context
	cancel context.CancelFunc
	next   chan uploadJob
	errs   chan error
}

func (c *Client) newUploader(ctx context.Context, progress func(int64)) *uploader {
	ctx, cancel := context.WithCancel(ctx)
	u := &uploader{ctx: ctx, cancel: cancel, next: make(chan uploadJob), errs: make(chan error, uploadWorkers)}
	for range uploadWorkers {
		go func() {
			var err error
			for j := range u.next {
				if err != nil {
					continue
				}
				if err = c.putBlobs(ctx, j, progress); err != nil {
					cancel()
				}
			}
			u.errs <- err
		}()
	}
	return u
}

// send hands a job to a worker; it fails once the uploader has stopped.
func (u *uploader) send(j uploadJob) error {
	select {
	case u.next <- j:
		return nil
	case <-u.ctx.Done():
		return u.ctx.Err()
	}
}

// wait lets the jobs sent finish and returns the first error.
func (u *uploader) wait() error {
	close(u.next)
	var first error
	for range uploadWorkers {
		if err := <-u.errs; err != nil && first == nil {
			first = err
		}
	}
	u.cancel()
	return first
}

// putBlobs uploads local files as blobs in one request: a tar stream of
// files each named by its digest. A server without batch uploads gets them
// one by one.
func (c *Client) putBlobs(ctx context.Context, blobs []blobFile, progress func(int64)) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBlobTar(pw, blobs, progress)) }()
	resp, err := c.request(ctx, "POST", "/v1/blobs/batch", pr, "application/x-tar")
	pr.CloseWithError(errors.New("request ended"))
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusMethodNotAllowed {
		for _, b := range blobs {
			if err := c.PutBlob(ctx, b.digest, b.path, progress); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("upload %d files: %w", len(blobs), err)
	}
	return resp.Body.Close()
}

// writeBlobTar writes the files as a tar stream of entries named by their
// digests; progress (if not nil) hears of the file bytes written.
func writeBlobTar(w io.Writer, blobs []blobFile, progress func(int64)) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, 64<<10)
	for _, b := range blobs {
		if err := writeBlobEntry(tw, b, buf); err != nil {
			return err
		}
		if progress != nil {
			progress(b.size)
		}
	}
	return tw.Close()
}

func writeBlobEntry(tw *tar.Writer, b blobFile, buf []byte) error {
	if b.data != nil {
		if err := tw.WriteHeader(&tar.Header{Name: b.digest, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b.data))}); err != nil {
			return err
		}
		_, err := tw.Write(b.data)
		return err
	}
	f, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: b.digest, Typeflag: tar.TypeReg, Mode: 0o644, Size: st.Size()}); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, st.Size()), buf)
	if err == nil && n < st.Size() {
		err = fmt.Errorf("%s: shrank while it was read", b.path)
	}
	return err
}
