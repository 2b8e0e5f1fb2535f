package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const endpointColumns = `name, spec, state, primary_key, secondary_key, created, updated`

func scanEndpoint(s scanner) (store.Endpoint, error) {
	var (
		e                store.Endpoint
		spec             []byte
		created, updated sql.NullInt64
	)
	if err := s.Scan(&e.Name, &spec, &e.State, &e.PrimaryKey, &e.SecondaryKey, &created, &updated); err != nil {
		return store.Endpoint{}, err
	}
	e.Spec, e.Created, e.Updated = spec, timeOf(created), timeOf(updated)
	return e, nil
}

// CreateEndpoint implements store.Endpoints.
func (s *Store) CreateEndpoint(ctx context.Context, e store.Endpoint) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO endpoints (`+endpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.Name, string(e.Spec), e.State, e.PrimaryKey, e.SecondaryKey, timeArg(e.Created), timeArg(e.Updated))
	if isUnique(err) {
		return fmt.Errorf("endpoint %s: %w", e.Name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create endpoint %s: %w", e.Name, err))
	}
	return nil
}

// GetEndpoint implements store.Endpoints.
func (s *Store) GetEndpoint(ctx context.Context, name string) (store.Endpoint, error) {
	e, err := scanEndpoint(s.readRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Endpoint{}, fmt.Errorf("endpoint %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Endpoint{}, fmt.Errorf("get endpoint %s: %w", name, err)
	}
	return e, nil
}

// ListEndpoints implements store.Endpoints.
func (s *Store) ListEndpoints(ctx context.Context) ([]store.Endpoint, error) {
	rows, err := s.query(ctx, s.r, `SELECT `+endpointColumns+` FROM endpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	defer rows.Close()
	out := []store.Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list endpoints: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// UpdateEndpoint implements store.Endpoints.
func (s *Store) UpdateEndpoint(ctx context.Context, e store.Endpoint) error {
	res, err := s.w.ExecContext(ctx, `UPDATE endpoints SET spec = ?, state = ?, primary_key = ?, secondary_key = ?, updated = ? WHERE name = ?`,
		string(e.Spec), e.State, e.PrimaryKey, e.SecondaryKey, timeArg(e.Updated), e.Name)
	if err != nil {
		return full(fmt.Errorf("update endpoint %s: %w", e.Name, err))
	}
	return endpointAffected(res, e.Name)
}

// DeleteEndpoint implements store.Endpoints.
func (s *Store) DeleteEndpoint(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM endpoints WHERE name = ?`, name)
	if err != nil {
		return full(fmt.Errorf("delete endpoint %s: %w", name, err))
	}
	return endpointAffected(res, name)
}

func endpointAffected(res sql.Result, name string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("endpoint %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("endpoint %s: %w", name, store.ErrNotFound)
	}
	return nil
}
