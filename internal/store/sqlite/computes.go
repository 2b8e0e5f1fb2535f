package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

const computeColumns = `name, type, spec, state, created, modified, status`

func scanCompute(s scanner) (store.Compute, error) {
	var (
		c                 store.Compute
		spec, status      []byte
		created, modified sql.NullInt64
	)
	if err := s.Scan(&c.Name, &c.Type, &spec, &c.State, &created, &modified, &status); err != nil {
		return store.Compute{}, err
	}
	c.Spec = spec
	if len(status) > 0 {
		c.Status = status
	}
	c.Created = timeOf(created)
	c.Modified = timeOf(modified)
	return c, nil
}

// normCompute is c as it reads back after being stored.
func normCompute(c store.Compute) store.Compute {
	c.Created = normTime(c.Created)
	c.Modified = normTime(c.Modified)
	return c
}

// computeCache keeps the list of computes for a moment: the dispatcher
// reads it on every pass (each job's submit and end), and under
// bench/dispatch that read was about a twentieth of the server's CPU,
// nearly all of it the query's own cost, for a list that seldom changes.
//
// Every write of a compute (CreateCompute, UpdateCompute, DeleteCompute)
// drops the list once it is over and bumps gen, so that a read that began
// before it (and so may hold the list as it was) does not put it back.
// Only this process writes the database (the server holds its data dir),
// so no write bypasses the cache; computeCacheTTL bounds the list's life
// all the same.
type computeCache struct {
	mu    sync.Mutex
	gen   uint64          // bumped by every write of a compute
	list  []store.Compute // nil: nothing cached
	until time.Time
	now   func() time.Time // time.Now; tests set it
}

const computeCacheTTL = time.Second

func (c *computeCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// get returns a copy of the cached list, or false and the generation to
// pass to put.
func (c *computeCache) get() ([]store.Compute, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.list == nil || !c.clock().Before(c.until) {
		return nil, c.gen, false
	}
	return cloneComputes(c.list), c.gen, true
}

// put caches a copy of cs, read from the database during generation gen,
// unless a compute was written since.
func (c *computeCache) put(cs []store.Compute, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	c.list, c.until = cloneComputes(cs), c.clock().Add(computeCacheTTL)
}

// changed drops the cached list: a compute was written (or its write
// failed, which may have changed nothing).
func (c *computeCache) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.list = nil
}

// cloneComputes copies cs and the JSON it holds, so that a caller that
// changes what it was given changes nobody else's.
func cloneComputes(cs []store.Compute) []store.Compute {
	out := make([]store.Compute, len(cs))
	for i, c := range cs {
		c.Spec, c.Status = bytes.Clone(c.Spec), bytes.Clone(c.Status)
		out[i] = c
	}
	return out
}

// CreateCompute implements store.Computes.
func (s *Store) CreateCompute(ctx context.Context, c store.Compute) error {
	defer s.computes.changed()
	_, err := s.w.ExecContext(ctx, `INSERT INTO computes (`+computeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.Name, c.Type, jsonArg(c.Spec), c.State, timeArg(c.Created), timeArg(c.Modified), jsonArg(c.Status))
	if isUnique(err) {
		return fmt.Errorf("compute %q: %w", c.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create compute %q: %w", c.Name, err)
	}
	return nil
}

// GetCompute implements store.Computes.
func (s *Store) GetCompute(ctx context.Context, name string) (store.Compute, error) {
	c, err := scanCompute(s.readRow(ctx, `SELECT `+computeColumns+` FROM computes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Compute{}, fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Compute{}, fmt.Errorf("get compute %q: %w", name, err)
	}
	return c, nil
}

// ListComputes implements store.Computes. The result is empty, not nil, when
// there are no targets.
func (s *Store) ListComputes(ctx context.Context) ([]store.Compute, error) {
	cached, gen, ok := s.computes.get()
	if ok {
		return cached, nil
	}
	rows, err := s.query(ctx, s.r, `SELECT `+computeColumns+` FROM computes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list computes: %w", err)
	}
	defer rows.Close()
	cs := []store.Compute{}
	for rows.Next() {
		c, err := scanCompute(rows)
		if err != nil {
			return nil, fmt.Errorf("list computes: %w", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list computes: %w", err)
	}
	s.computes.put(cs, gen)
	return cs, nil
}

// UpdateCompute implements store.Computes. A change fn makes to Name is
// ignored: the target keeps its name.
func (s *Store) UpdateCompute(ctx context.Context, name string, fn func(*store.Compute) error) (store.Compute, error) {
	defer s.computes.changed()
	var out store.Compute
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := scanCompute(tx.QueryRowContext(ctx, `SELECT `+computeColumns+` FROM computes WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update compute %q: %w", name, err)
		}
		if err := fn(&c); err != nil {
			return err
		}
		c.Name = name
		if _, err := tx.ExecContext(ctx, `UPDATE computes SET type = ?, spec = ?, state = ?, created = ?, modified = ?, status = ? WHERE name = ?`,
			c.Type, jsonArg(c.Spec), c.State, timeArg(c.Created), timeArg(c.Modified), jsonArg(c.Status), name); err != nil {
			return fmt.Errorf("update compute %q: %w", name, err)
		}
		out = normCompute(c)
		return nil
	})
	if err != nil {
		return store.Compute{}, err
	}
	return out, nil
}

// DeleteCompute implements store.Computes.
func (s *Store) DeleteCompute(ctx context.Context, name string) error {
	defer s.computes.changed()
	res, err := s.w.ExecContext(ctx, `DELETE FROM computes WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete compute %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete compute %q: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
	}
	return nil
}
