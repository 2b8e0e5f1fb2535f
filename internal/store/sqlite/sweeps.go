package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// CreateSweep implements store.Sweeps.
func (s *Store) CreateSweep(ctx context.Context, name string, created time.Time) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO sweeps (name, done, created) VALUES (?, 0, ?)`, name, timeArg(created))
	if isUnique(err) {
		return fmt.Errorf("sweep %s: %w", name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create sweep %s: %w", name, err))
	}
	return nil
}

// ListOpenSweeps implements store.Sweeps.
func (s *Store) ListOpenSweeps(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name FROM sweeps WHERE done = 0 ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("list sweeps: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list sweeps: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// SweepDone implements store.Sweeps.
func (s *Store) SweepDone(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `UPDATE sweeps SET done = 1 WHERE name = ?`, name)
	if err != nil {
		return full(fmt.Errorf("sweep %s done: %w", name, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sweep %s done: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("sweep %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// AddSweepTrial implements store.Sweeps.
func (s *Store) AddSweepTrial(ctx context.Context, t store.SweepTrial) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO sweep_trials (sweep, idx, job, params, created) VALUES (?, ?, ?, ?, ?)`,
		t.Sweep, t.Index, t.Job, string(t.Params), timeArg(t.Created))
	if isUnique(err) {
		return fmt.Errorf("trial %d of sweep %s: %w", t.Index, t.Sweep, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("add trial %d of sweep %s: %w", t.Index, t.Sweep, err))
	}
	return nil
}

// ListSweepTrials implements store.Sweeps.
func (s *Store) ListSweepTrials(ctx context.Context, sweep string) ([]store.SweepTrial, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT sweep, idx, job, params, created FROM sweep_trials WHERE sweep = ? ORDER BY idx`, sweep)
	if err != nil {
		return nil, fmt.Errorf("list trials of sweep %s: %w", sweep, err)
	}
	defer rows.Close()
	out := []store.SweepTrial{}
	for rows.Next() {
		var (
			t       store.SweepTrial
			params  string
			created sql.NullInt64
		)
		if err := rows.Scan(&t.Sweep, &t.Index, &t.Job, &params, &created); err != nil {
			return nil, fmt.Errorf("list trials of sweep %s: %w", sweep, err)
		}
		t.Params, t.Created = []byte(params), timeOf(created)
		out = append(out, t)
	}
	return out, rows.Err()
}
