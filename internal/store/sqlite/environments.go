package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const environmentColumns = `name, version, description, spec, hash, created`

func scanEnvironment(s scanner) (store.Environment, error) {
	var (
		e       store.Environment
		spec    []byte
		created sql.NullInt64
	)
	if err := s.Scan(&e.Name, &e.Version, &e.Description, &spec, &e.Hash, &created); err != nil {
		return store.Environment{}, err
	}
	e.Spec, e.Created = spec, timeOf(created)
	return e, nil
}

// CreateEnvironment implements store.Assets.
func (s *Store) CreateEnvironment(ctx context.Context, e store.Environment) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO environments (`+environmentColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		e.Name, e.Version, e.Description, jsonArg(e.Spec), e.Hash, timeArg(e.Created))
	if isUnique(err) {
		return fmt.Errorf("environment %s:%s: %w", e.Name, e.Version, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create environment %s:%s: %w", e.Name, e.Version, err)
	}
	return nil
}

// GetEnvironment implements store.Assets.
func (s *Store) GetEnvironment(ctx context.Context, name, version string) (store.Environment, error) {
	return environmentTable.get(ctx, s.r, name, version)
}

// ListEnvironments implements store.Assets.
func (s *Store) ListEnvironments(ctx context.Context, name string) ([]store.Environment, error) {
	return environmentTable.list(ctx, s.r, name)
}
