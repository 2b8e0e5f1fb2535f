package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

// SetRunValues implements store.Metrics. All of vs are stored, or none.
func (s *Store) SetRunValues(ctx context.Context, job string, vs []store.RunValue) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.w, job); err != nil {
			return err
		}
		for _, v := range vs {
			_, err := tx.ExecContext(ctx, `INSERT INTO run_values (job, kind, key, value) VALUES (?, ?, ?, ?)
				ON CONFLICT (job, kind, key) DO UPDATE SET value = excluded.value`, job, v.Kind, v.Key, v.Value)
			if err != nil {
				return fmt.Errorf("set %s %q of job %q: %w", v.Kind, v.Key, job, err)
			}
		}
		return nil
	})
}

// ListRunValues implements store.Metrics.
func (s *Store) ListRunValues(ctx context.Context, job string) ([]store.RunValue, error) {
	vs := []store.RunValue{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.r, job); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT kind, key, value FROM run_values WHERE job = ? ORDER BY kind, key`, job)
		if err != nil {
			return fmt.Errorf("list params and tags of job %q: %w", job, err)
		}
		defer rows.Close()
		for rows.Next() {
			var v store.RunValue
			if err := rows.Scan(&v.Kind, &v.Key, &v.Value); err != nil {
				return fmt.Errorf("list params and tags of job %q: %w", job, err)
			}
			vs = append(vs, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return vs, nil
}
