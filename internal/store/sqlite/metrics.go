package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/ferry-ml/ferry/internal/store"
)

// AddMetrics implements store.Metrics. All of ms are stored, or none.
func (s *Store) AddMetrics(ctx context.Context, job string, ms []store.Metric) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.w, job); err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			_, err := s.txExec(ctx, tx, s.w, qAddMetric, job, m.Name, floatArg(m.Value), m.Step, timeArg(m.Time))
			if err != nil {
				return fmt.Errorf("add metric %q to job %q: %w", m.Name, job, err)
			}
		}
		return nil
	})
}

// AddNumberedMetrics implements store.Metrics.
func (s *Store) AddNumberedMetrics(ctx context.Context, job string, attempt, rank int, first int64, ms []store.Metric) (int64, error) {
	if first < 1 {
		return 0, fmt.Errorf("add metrics to job %q: sequence numbers start at 1, not %d", job, first)
	}
	var high int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.w, job); err != nil {
			return err
		}
		err := tx.QueryRowContext(ctx, `SELECT seq FROM metric_seqs WHERE job = ? AND attempt = ? AND rank = ?`, job, attempt, rank).Scan(&high)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("add metrics to job %q: %w", job, err)
		}
		skip := max(high-first+1, 0)
		if skip >= int64(len(ms)) {
			return nil
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO metrics (job, name, value, step, time) VALUES (?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("add metrics to job %q: %w", job, err)
		}
		defer stmt.Close()
		for _, m := range ms[skip:] {
			if _, err := stmt.ExecContext(ctx, job, m.Name, floatArg(m.Value), m.Step, timeArg(m.Time)); err != nil {
				return fmt.Errorf("add metric %q to job %q: %w", m.Name, job, err)
			}
		}
		high = first + int64(len(ms)) - 1
		_, err = tx.ExecContext(ctx, `INSERT INTO metric_seqs (job, attempt, rank, seq) VALUES (?, ?, ?, ?)
			ON CONFLICT (job, attempt, rank) DO UPDATE SET seq = excluded.seq`, job, attempt, rank, high)
		if err != nil {
			return fmt.Errorf("add metrics to job %q: %w", job, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return high, nil
}

func scanMetric(s scanner) (store.Metric, error) {
	var (
		m store.Metric
		v sql.NullFloat64
		t sql.NullInt64
	)
	if err := s.Scan(&m.Name, &v, &m.Step, &t); err != nil {
		return store.Metric{}, err
	}
	m.Value = floatOf(v)
	m.Time = timeOf(t)
	return m, nil
}

// ListMetrics implements store.Metrics. It returns ErrNotFound if there is no
// such job, and an empty, non-nil slice when the job has no such values. A
// NaN value reads back as NaN.
func (s *Store) ListMetrics(ctx context.Context, job, name string) ([]store.Metric, error) {
	q, args := `SELECT name, value, step, time FROM metrics WHERE job = ? ORDER BY id`, []any{job}
	if name != "" {
		q, args = `SELECT name, value, step, time FROM metrics WHERE job = ? AND name = ? ORDER BY id`, []any{job, name}
	}
	ms := []store.Metric{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.r, job); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("list metrics of job %q: %w", job, err)
		}
		defer rows.Close()
		for rows.Next() {
			m, err := scanMetric(rows)
			if err != nil {
				return fmt.Errorf("list metrics of job %q: %w", job, err)
			}
			ms = append(ms, m)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list metrics of job %q: %w", job, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ms, nil
}

// LatestMetrics implements store.Metrics. It returns ErrNotFound if there is no
// such job, and an empty, non-nil map for a job without metrics.
func (s *Store) LatestMetrics(ctx context.Context, job string) (map[string]store.Metric, error) {
	latest := map[string]store.Metric{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.r, job); err != nil {
			return err
		}
		// The metrics_job_name index holds the rowid (id), so the inner
		// query reads only the index.
		rows, err := s.txQuery(ctx, tx, s.r, qLatestMetrics, job)
		if err != nil {
			return fmt.Errorf("latest metrics of job %q: %w", job, err)
		}
		defer rows.Close()
		for rows.Next() {
			m, err := scanMetric(rows)
			if err != nil {
				return fmt.Errorf("latest metrics of job %q: %w", job, err)
			}
			latest[m.Name] = m
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("latest metrics of job %q: %w", job, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return latest, nil
}

// latestChunk bounds the job names bound into one query, well under
// SQLite's limit on host parameters.
const latestChunk = 500

// LatestMetricsOf implements store.Metrics: one read transaction, one query
// per latestChunk jobs.
func (s *Store) LatestMetricsOf(ctx context.Context, jobs []string) (map[string]map[string]store.Metric, error) {
	out := map[string]map[string]store.Metric{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		for len(jobs) > 0 {
			chunk := jobs[:min(len(jobs), latestChunk)]
			jobs = jobs[len(chunk):]
			args := make([]any, len(chunk))
			for i, j := range chunk {
				args[i] = j
			}
			// As in LatestMetrics, the inner query reads only the
			// metrics_job_name index.
			rows, err := tx.QueryContext(ctx, `SELECT job, name, value, step, time FROM metrics
				WHERE id IN (SELECT max(id) FROM metrics WHERE job IN (?`+strings.Repeat(", ?", len(chunk)-1)+`) GROUP BY job, name)`, args...)
			if err != nil {
				return fmt.Errorf("latest metrics of %d jobs: %w", len(chunk), err)
			}
			if err := scanLatest(rows, out); err != nil {
				return fmt.Errorf("latest metrics of %d jobs: %w", len(chunk), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func scanLatest(rows *sql.Rows, out map[string]map[string]store.Metric) error {
	defer rows.Close()
	for rows.Next() {
		var job string
		var (
			m store.Metric
			v sql.NullFloat64
			t sql.NullInt64
		)
		if err := rows.Scan(&job, &m.Name, &v, &m.Step, &t); err != nil {
			return err
		}
		m.Value, m.Time = floatOf(v), timeOf(t)
		if out[job] == nil {
			out[job] = map[string]store.Metric{}
		}
		out[job][m.Name] = m
	}
	return rows.Err()
}
