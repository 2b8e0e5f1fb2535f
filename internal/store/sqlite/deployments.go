package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const deploymentColumns = `endpoint, name, spec, state, reason, replicas, created, updated`

func scanDeployment(s scanner) (store.Deployment, error) {
	var (
		d                store.Deployment
		spec, replicas   []byte
		created, updated sql.NullInt64
	)
	if err := s.Scan(&d.Endpoint, &d.Name, &spec, &d.State, &d.Reason, &replicas, &created, &updated); err != nil {
		return store.Deployment{}, err
	}
	d.Spec, d.Replicas, d.Created, d.Updated = spec, replicas, timeOf(created), timeOf(updated)
	return d, nil
}

func replicasArg(d store.Deployment) string {
	if len(d.Replicas) == 0 {
		return "{}"
	}
	return string(d.Replicas)
}

// CreateDeployment implements store.Endpoints.
func (s *Store) CreateDeployment(ctx context.Context, d store.Deployment) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO deployments (`+deploymentColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		d.Endpoint, d.Name, string(d.Spec), d.State, d.Reason, replicasArg(d), timeArg(d.Created), timeArg(d.Updated))
	if isUnique(err) {
		return fmt.Errorf("deployment %s/%s: %w", d.Endpoint, d.Name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create deployment %s/%s: %w", d.Endpoint, d.Name, err))
	}
	return nil
}

// GetDeployment implements store.Endpoints.
func (s *Store) GetDeployment(ctx context.Context, endpoint, name string) (store.Deployment, error) {
	d, err := scanDeployment(s.readRow(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE endpoint = ? AND name = ?`, endpoint, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Deployment{}, fmt.Errorf("deployment %s/%s: %w", endpoint, name, store.ErrNotFound)
	}
	if err != nil {
		return store.Deployment{}, fmt.Errorf("get deployment %s/%s: %w", endpoint, name, err)
	}
	return d, nil
}

// ListDeployments implements store.Endpoints.
func (s *Store) ListDeployments(ctx context.Context, endpoint string) ([]store.Deployment, error) {
	q, args := `SELECT `+deploymentColumns+` FROM deployments ORDER BY endpoint, name`, []any{}
	if endpoint != "" {
		q, args = `SELECT `+deploymentColumns+` FROM deployments WHERE endpoint = ? ORDER BY name`, []any{endpoint}
	}
	rows, err := s.query(ctx, s.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", err)
	}
	defer rows.Close()
	out := []store.Deployment{}
	for rows.Next() {
		d, err := scanDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// UpdateDeployment implements store.Endpoints.
func (s *Store) UpdateDeployment(ctx context.Context, d store.Deployment) error {
	res, err := s.w.ExecContext(ctx, `UPDATE deployments SET spec = ?, state = ?, reason = ?, replicas = ?, updated = ? WHERE endpoint = ? AND name = ?`,
		string(d.Spec), d.State, d.Reason, replicasArg(d), timeArg(d.Updated), d.Endpoint, d.Name)
	if err != nil {
		return full(fmt.Errorf("update deployment %s/%s: %w", d.Endpoint, d.Name, err))
	}
	return deploymentAffected(res, d.Endpoint, d.Name)
}

// DeleteDeployment implements store.Endpoints.
func (s *Store) DeleteDeployment(ctx context.Context, endpoint, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM deployments WHERE endpoint = ? AND name = ?`, endpoint, name)
	if err != nil {
		return full(fmt.Errorf("delete deployment %s/%s: %w", endpoint, name, err))
	}
	return deploymentAffected(res, endpoint, name)
}

func deploymentAffected(res sql.Result, endpoint, name string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("deployment %s/%s: %w", endpoint, name, err)
	}
	if n == 0 {
		return fmt.Errorf("deployment %s/%s: %w", endpoint, name, store.ErrNotFound)
	}
	return nil
}
