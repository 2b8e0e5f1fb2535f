package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

// AddPreemption implements store.Jobs.
func (s *Store) AddPreemption(ctx context.Context, p store.Preemption) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.w, p.Job); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO preemptions (job, attempt, node, time, reason) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (job, attempt) DO NOTHING`, p.Job, p.Attempt, p.Node, timeArg(p.Time), p.Reason); err != nil {
			return fmt.Errorf("add preemption of job %q attempt %d: %w", p.Job, p.Attempt, err)
		}
		return nil
	})
}

// ListPreemptions implements store.Jobs.
func (s *Store) ListPreemptions(ctx context.Context, job string) ([]store.Preemption, error) {
	ps := []store.Preemption{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.r, job); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT attempt, node, time, reason FROM preemptions WHERE job = ? ORDER BY attempt`, job)
		if err != nil {
			return fmt.Errorf("list preemptions of job %q: %w", job, err)
		}
		defer rows.Close()
		for rows.Next() {
			p := store.Preemption{Job: job}
			var t sql.NullInt64
			if err := rows.Scan(&p.Attempt, &p.Node, &t, &p.Reason); err != nil {
				return fmt.Errorf("list preemptions of job %q: %w", job, err)
			}
			p.Time = timeOf(t)
			ps = append(ps, p)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list preemptions of job %q: %w", job, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ps, nil
}
