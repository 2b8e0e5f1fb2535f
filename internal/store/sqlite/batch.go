package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const (
	batchEndpointColumns   = `name, spec, jobs, created, updated`
	batchDeploymentColumns = `endpoint, name, spec, created, updated`
)

func scanBatchEndpoint(s scanner) (store.BatchEndpoint, error) {
	var (
		e                store.BatchEndpoint
		spec, jobs       []byte
		created, updated sql.NullInt64
	)
	if err := s.Scan(&e.Name, &spec, &jobs, &created, &updated); err != nil {
		return store.BatchEndpoint{}, err
	}
	e.Spec, e.Jobs, e.Created, e.Updated = spec, jobs, timeOf(created), timeOf(updated)
	return e, nil
}

func scanBatchDeployment(s scanner) (store.BatchDeployment, error) {
	var (
		d                store.BatchDeployment
		spec             []byte
		created, updated sql.NullInt64
	)
	if err := s.Scan(&d.Endpoint, &d.Name, &spec, &created, &updated); err != nil {
		return store.BatchDeployment{}, err
	}
	d.Spec, d.Created, d.Updated = spec, timeOf(created), timeOf(updated)
	return d, nil
}

func jobsArg(e store.BatchEndpoint) string {
	if len(e.Jobs) == 0 {
		return "[]"
	}
	return string(e.Jobs)
}

// CreateBatchEndpoint implements store.BatchEndpoints.
func (s *Store) CreateBatchEndpoint(ctx context.Context, e store.BatchEndpoint) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO batch_endpoints (`+batchEndpointColumns+`) VALUES (?, ?, ?, ?, ?)`,
		e.Name, string(e.Spec), jobsArg(e), timeArg(e.Created), timeArg(e.Updated))
	if isUnique(err) {
		return fmt.Errorf("batch endpoint %s: %w", e.Name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create batch endpoint %s: %w", e.Name, err))
	}
	return nil
}

// GetBatchEndpoint implements store.BatchEndpoints.
func (s *Store) GetBatchEndpoint(ctx context.Context, name string) (store.BatchEndpoint, error) {
	e, err := scanBatchEndpoint(s.r.QueryRowContext(ctx, `SELECT `+batchEndpointColumns+` FROM batch_endpoints WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.BatchEndpoint{}, fmt.Errorf("batch endpoint %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.BatchEndpoint{}, fmt.Errorf("get batch endpoint %s: %w", name, err)
	}
	return e, nil
}

// ListBatchEndpoints implements store.BatchEndpoints.
func (s *Store) ListBatchEndpoints(ctx context.Context) ([]store.BatchEndpoint, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+batchEndpointColumns+` FROM batch_endpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list batch endpoints: %w", err)
	}
	defer rows.Close()
	out := []store.BatchEndpoint{}
	for rows.Next() {
		e, err := scanBatchEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list batch endpoints: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// UpdateBatchEndpoint implements store.BatchEndpoints.
func (s *Store) UpdateBatchEndpoint(ctx context.Context, e store.BatchEndpoint) error {
	res, err := s.w.ExecContext(ctx, `UPDATE batch_endpoints SET spec = ?, jobs = ?, updated = ? WHERE name = ?`,
		string(e.Spec), jobsArg(e), timeArg(e.Updated), e.Name)
	if err != nil {
		return full(fmt.Errorf("update batch endpoint %s: %w", e.Name, err))
	}
	return batchAffected(res, "batch endpoint "+e.Name)
}

// DeleteBatchEndpoint implements store.BatchEndpoints.
func (s *Store) DeleteBatchEndpoint(ctx context.Context, name string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM batch_deployments WHERE endpoint = ?`, name); err != nil {
			return fmt.Errorf("delete batch endpoint %s: %w", name, err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM batch_endpoints WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("delete batch endpoint %s: %w", name, err)
		}
		return batchAffected(res, "batch endpoint "+name)
	})
}

// CreateBatchDeployment implements store.BatchEndpoints.
func (s *Store) CreateBatchDeployment(ctx context.Context, d store.BatchDeployment) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO batch_deployments (`+batchDeploymentColumns+`) VALUES (?, ?, ?, ?, ?)`,
		d.Endpoint, d.Name, string(d.Spec), timeArg(d.Created), timeArg(d.Updated))
	if isUnique(err) {
		return fmt.Errorf("batch deployment %s/%s: %w", d.Endpoint, d.Name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create batch deployment %s/%s: %w", d.Endpoint, d.Name, err))
	}
	return nil
}

// GetBatchDeployment implements store.BatchEndpoints.
func (s *Store) GetBatchDeployment(ctx context.Context, endpoint, name string) (store.BatchDeployment, error) {
	d, err := scanBatchDeployment(s.r.QueryRowContext(ctx, `SELECT `+batchDeploymentColumns+` FROM batch_deployments WHERE endpoint = ? AND name = ?`, endpoint, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.BatchDeployment{}, fmt.Errorf("batch deployment %s/%s: %w", endpoint, name, store.ErrNotFound)
	}
	if err != nil {
		return store.BatchDeployment{}, fmt.Errorf("get batch deployment %s/%s: %w", endpoint, name, err)
	}
	return d, nil
}

// ListBatchDeployments implements store.BatchEndpoints.
func (s *Store) ListBatchDeployments(ctx context.Context, endpoint string) ([]store.BatchDeployment, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+batchDeploymentColumns+` FROM batch_deployments WHERE endpoint = ? ORDER BY name`, endpoint)
	if err != nil {
		return nil, fmt.Errorf("list batch deployments: %w", err)
	}
	defer rows.Close()
	out := []store.BatchDeployment{}
	for rows.Next() {
		d, err := scanBatchDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("list batch deployments: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// UpdateBatchDeployment implements store.BatchEndpoints.
func (s *Store) UpdateBatchDeployment(ctx context.Context, d store.BatchDeployment) error {
	res, err := s.w.ExecContext(ctx, `UPDATE batch_deployments SET spec = ?, updated = ? WHERE endpoint = ? AND name = ?`,
		string(d.Spec), timeArg(d.Updated), d.Endpoint, d.Name)
	if err != nil {
		return full(fmt.Errorf("update batch deployment %s/%s: %w", d.Endpoint, d.Name, err))
	}
	return batchAffected(res, "batch deployment "+d.Endpoint+"/"+d.Name)
}

// DeleteBatchDeployment implements store.BatchEndpoints.
func (s *Store) DeleteBatchDeployment(ctx context.Context, endpoint, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM batch_deployments WHERE endpoint = ? AND name = ?`, endpoint, name)
	if err != nil {
		return full(fmt.Errorf("delete batch deployment %s/%s: %w", endpoint, name, err))
	}
	return batchAffected(res, "batch deployment "+endpoint+"/"+name)
}

// batchAffected is ErrNotFound, naming what, when res changed no row.
func batchAffected(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}
