package client

import (
	"context"
	"errors"
	"net/http"

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
// the tree's stat cache knows them), asks the server which blobs it lacks
// a run of files at a time and sends those while the next are read, small
// ones many to a request and from the content the hashing read, then
// stores the manifest. It returns the snapshot id and what it sent.
// progress, if not nil, hears of every byte sent; it may be called from
// several goroutines.
func (c *Client) UploadTree(ctx context.Context, t *snapshot.Tree, progress func(int64)) (string, UploadStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := c.newUploader(ctx, progress)
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
	s := treeSender{c: c, up: up, seen: map[string]bool{}, stats: UploadStats{Files: t.Len()}, allCached: true}
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
	if serr == nil && r.err == nil && s.allCached && !s.flushed {
		// Nothing was read, so most likely nothing changed since the
		// server took it all: try the manifest first, which the server
		// refuses (400) if it lacks a blob, and save asking.
		if id, err := c.CreateSnapshot(ctx, r.m); err == nil || StatusOf(err) != http.StatusBadRequest {
			up.wait()
			return id, s.stats, err
		}
	}
	if serr == nil && r.err == nil {
		serr = s.flush(up.ctx)
	}
	uerr := up.wait()
	// The first cause, not the cancels it led to.
	for _, err := range []error{uerr, serr, r.err} {
		if err != nil && !errors.Is(err, context.Canceled) {
			return "", s.stats, err
		}
	}
	if err := errors.Join(uerr, serr, r.err); err != nil {
		return "", s.stats, err
	}
	id, err := c.CreateSnapshot(ctx, r.m)
	return id, s.stats, err
}

// treeSender gathers hashed files and sends those the server lacks.
type treeSender struct {
	c       *Client
	up      *uploader
	pending []snapshot.Hashed
	bytes   int64           // read (not cached) in pending
	seen    map[string]bool // digests asked after already
	stats   UploadStats
	// allCached says every file so far came from the stat cache; flushed
	// that the server was asked.
	allCached, flushed bool
}

func (s *treeSender) add(run []snapshot.Hashed) {
	for _, h := range run {
		if s.seen[h.Digest] {
			continue
		}
		s.seen[h.Digest] = true
		s.pending = append(s.pending, h)
		if !h.Cached {
			s.bytes += h.Size
			s.allCached = false
		}
	}
}

// flush asks which pending blobs the server lacks and hands those to the
// uploader.
func (s *treeSender) flush(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	s.flushed = true
	digests := make([]string, len(s.pending))
	for i, h := range s.pending {
		digests[i] = h.Digest
	}
	miss, err := s.c.Missing(ctx, digests)
	if err != nil {
		return err
	}
	missing := make(map[string]bool, len(miss))
	for _, d := range miss {
		missing[d] = true
	}
	var batch uploadJob
	var batchSize int64
	for _, h := range s.pending {
		if !missing[h.Digest] {
			continue
		}
		s.stats.Uploaded++
		s.stats.Bytes += h.Size
		b := blobFile{digest: h.Digest, path: h.Src, size: h.Size, data: h.Data}
		if b.size > smallBlob {
			if err := s.up.send(uploadJob{b}); err != nil {
				return err
			}
			continue
		}
		if len(batch) > 0 && (len(batch) >= batchBlobs || batchSize+b.size > batchBytes) {
			if err := s.up.send(batch); err != nil {
				return err
			}
			batch, batchSize = nil, 0
		}
		batch = append(batch, b)
		batchSize += b.size
	}
	if len(batch) > 0 {
		if err := s.up.send(batch); err != nil {
			return err
		}
	}
	s.pending, s.bytes = s.pending[:0], 0
	return nil
}
