package client

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/ferry-ml/ferry/internal/snapshot"
)

// The files UploadTree has hashed are asked after (Missing) and sent once
// they hold flushBytes of content read, or flushFiles files: few round
// trips for a tree of tiny files, and sending starts while the rest of a
// large tree is read.
const (
	flushBytes = 16 << 20
	flushFiles = missingChunk
)

// UploadTree snapshots a walked tree and sends what the server lacks: it
// hashes the files (snapshot.Tree.Hash: in parallel, and not at all where
// the tree's stat cache knows them), asks the server which of those it
// read it lacks, a run at a time, and sends them while the next are read,
// small ones many to a request and from the content the hashing read,
// then stores the manifest. Files the stat cache knew are taken to be
// held by the server, as they were when they were last sent; only if the
// server refuses the manifest for a missing blob are they asked about and
// sent. It returns the snapshot id and what it sent. progress, if not
// nil, hears of every byte sent; it may be called from several
// goroutines.
func (c *Client) UploadTree(ctx context.Context, t *snapshot.Tree, progress func(int64)) (string, UploadStats, error) {
	s := treeSender{c: c, seen: map[string]bool{}, stats: UploadStats{Files: t.Len()}}
	m, err := s.sendRead(ctx, t, progress)
	if err != nil {
		return "", s.stats, err
	}
	if !s.readAny {
		// Nothing was read, so most likely nothing changed since the
		// server took it all. A manifest the server holds is a snapshot
		// a job may name (it checks no more at submit), so one tiny
		// question may settle it.
		id := m.ID()
		if miss, err := c.Missing(ctx, []string{id}); err == nil && len(miss) == 0 {
			return id, s.stats, nil
		}
	}
	id, err := c.CreateSnapshot(ctx, m)
	if StatusOf(err) != http.StatusBadRequest || len(s.known) == 0 {
		return id, s.stats, err
	}
	// The server lacks a blob of a file the stat cache knew: ask about
	// those and send them.
	up := c.newUploader(ctx, progress)
	s.up, s.pending = up, s.known
	err = s.flush(up.ctx)
	if uerr := up.wait(); uerr != nil {
		err = uerr
	}
	if err != nil {
		return "", s.stats, err
	}
	id, err = c.CreateSnapshot(ctx, m)
	return id, s.stats, err
}

// sendRead hashes the tree and sends the files it read that the server
// lacks while it reads the rest; it returns the manifest.
func (s *treeSender) sendRead(ctx context.Context, t *snapshot.Tree, progress func(int64)) (*snapshot.Manifest, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := s.c.newUploader(ctx, progress)
	s.up = up
	hashed := make(chan []snapshot.Hashed, 4)
	type result struct {
		m   *snapshot.Manifest
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, _, err := t.Hash(func(run []snapshot.Hashed) error {
			select {
			case hashed <- run:
				return nil
			case <-up.ctx.Done():
				return up.ctx.Err()
			}
		})
		close(hashed)
		done <- result{m, err}
	}()
	var serr error
	for run := range hashed {
		if serr != nil {
			continue // let the hashing see the cancel and end
		}
		s.add(run)
		if s.bytes >= flushBytes || len(s.pending) >= flushFiles {
			if serr = s.flush(up.ctx); serr != nil {
				cancel()
			}
		}
	}
	r := <-done
	if serr == nil && r.err == nil {
		serr = s.flush(up.ctx)
	}
	uerr := up.wait()
	// The first cause, not the cancels it led to.
	for _, err := range []error{uerr, serr, r.err} {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(uerr, serr, r.err); err != nil {
		return nil, err
	}
	return r.m, nil
}

// treeSender gathers hashed files and sends those the server lacks.
type treeSender struct {
	c       *Client
	up      *uploader
	pending []snapshot.Hashed // read, not yet asked about
	bytes   int64             // in pending
	known   []snapshot.Hashed // from the stat cache, not asked about
	seen    map[string]bool   // digests in pending or known, or asked about
	readAny bool
	stats   UploadStats
}

func (s *treeSender) add(run []snapshot.Hashed) {
	for _, h := range run {
		if !h.Cached {
			s.readAny = true
		}
		if s.seen[h.Digest] {
			continue
		}
		s.seen[h.Digest] = true
		if h.Cached {
			s.known = append(s.known, h)
			continue
		}
		s.pending = append(s.pending, h)
		s.bytes += h.Size
	}
}

// flush asks which pending blobs the server lacks and hands those to the
// uploader.
func (s *treeSender) flush(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	missing := map[string]bool{}
	for chunk := range slices.Chunk(s.pending, missingChunk) {
		digests := make([]string, len(chunk))
		for i, h := range chunk {
			digests[i] = h.Digest
		}
		miss, err := s.c.Missing(ctx, digests)
		if err != nil {
			return err
		}
		for _, d := range miss {
			missing[d] = true
		}
	}
	var bt batcher
	for _, h := range s.pending {
		if !missing[h.Digest] {
			continue
		}
		s.stats.Uploaded++
		s.stats.Bytes += h.Size
		if full := bt.add(blobFile{digest: h.Digest, path: h.Src, size: h.Size, data: h.Data}); full != nil {
			if err := s.up.send(full); err != nil {
				return err
			}
		}
	}
	if rest := bt.rest(); rest != nil {
		if err := s.up.send(rest); err != nil {
			return err
		}
	}
	s.pending, s.bytes = s.pending[:0], 0
	return nil
}
