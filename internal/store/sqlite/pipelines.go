package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const stepColumns = `pipeline, step, job, reuse_key, reused_from, state, reason`

func scanStep(s scanner) (store.PipelineStep, error) {
	var p store.PipelineStep
	err := s.Scan(&p.Pipeline, &p.Step, &p.Job, &p.ReuseKey, &p.ReusedFrom, &p.State, &p.Reason)
	return p, err
}

// CreatePipelineJob implements store.Pipelines.
func (s *Store) CreatePipelineJob(ctx context.Context, j store.Job, first store.Event, steps []store.PipelineStep) (store.Job, error) {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.insertJob(ctx, tx, &j, first); err != nil {
			return err
		}
		return insertSteps(ctx, tx, j.Name, steps)
	})
	if err != nil {
		return store.Job{}, full(err)
	}
	return normJob(j), nil
}

// insertSteps stores the steps of pipeline, a job written in the same
// transaction.
func insertSteps(ctx context.Context, tx *sql.Tx, pipeline string, steps []store.PipelineStep) error {
	for _, st := range steps {
		if _, err := tx.ExecContext(ctx, `INSERT INTO pipeline_steps (`+stepColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			pipeline, st.Step, st.Job, st.ReuseKey, st.ReusedFrom, st.State, st.Reason); err != nil {
			return fmt.Errorf("create job %q: step %s: %w", pipeline, st.Step, err)
		}
	}
	return nil
}

// ListPipelineSteps implements store.Pipelines.
func (s *Store) ListPipelineSteps(ctx context.Context, pipeline string) ([]store.PipelineStep, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+stepColumns+` FROM pipeline_steps WHERE pipeline = ? ORDER BY seq`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("list steps of %s: %w", pipeline, err)
	}
	defer rows.Close()
	out := []store.PipelineStep{}
	for rows.Next() {
		st, err := scanStep(rows)
		if err != nil {
			return nil, fmt.Errorf("list steps of %s: %w", pipeline, err)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// PipelineStepJobs implements store.Pipelines.
func (s *Store) PipelineStepJobs(ctx context.Context, pipeline string) (map[string]store.Job, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE name IN
		(SELECT job FROM pipeline_steps WHERE pipeline = ? AND job != '')`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("jobs of the steps of %s: %w", pipeline, err)
	}
	defer rows.Close()
	out := map[string]store.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("jobs of the steps of %s: %w", pipeline, err)
		}
		out[j.Name] = j
	}
	return out, rows.Err()
}

// UpdatePipelineStep implements store.Pipelines.
func (s *Store) UpdatePipelineStep(ctx context.Context, st store.PipelineStep) error {
	res, err := s.w.ExecContext(ctx, `UPDATE pipeline_steps SET job = ?, reuse_key = ?, reused_from = ?, state = ?, reason = ?
		WHERE pipeline = ? AND step = ?`, st.Job, st.ReuseKey, st.ReusedFrom, st.State, st.Reason, st.Pipeline, st.Step)
	if err != nil {
		return full(fmt.Errorf("update step %s of %s: %w", st.Step, st.Pipeline, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("step %s of %s: %w", st.Step, st.Pipeline, store.ErrNotFound)
	}
	return nil
}

// ActivePipelines implements store.Pipelines.
func (s *Store) ActivePipelines(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT j.name FROM jobs j
		WHERE j.name IN (SELECT DISTINCT pipeline FROM pipeline_steps)
		AND j.status NOT IN ('Completed', 'Failed', 'Canceled') ORDER BY j.seq`)
	if err != nil {
		return nil, fmt.Errorf("list active pipelines: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// ReusableStep implements store.Pipelines.
func (s *Store) ReusableStep(ctx context.Context, key string) (string, error) {
	var job string
	err := s.r.QueryRowContext(ctx, `SELECT ps.job FROM pipeline_steps ps JOIN jobs j ON j.name = ps.job
		WHERE ps.reuse_key = ? AND j.status = 'Completed' ORDER BY j.seq DESC LIMIT 1`, key).Scan(&job)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("step with reuse key %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("find reusable step: %w", err)
	}
	return job, nil
}
