package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const componentColumns = `name, version, description, spec, code_snapshot, hash, created`

func scanComponent(s scanner) (store.Component, error) {
	var (
		c       store.Component
		spec    []byte
		created sql.NullInt64
	)
	if err := s.Scan(&c.Name, &c.Version, &c.Description, &spec, &c.CodeSnapshot, &c.Hash, &created); err != nil {
		return store.Component{}, err
	}
	c.Spec, c.Created = spec, timeOf(created)
	return c, nil
}

var componentTable = versioned[store.Component]{"components", componentColumns, "component", scanComponent}

// CreateComponent implements store.Assets.
func (s *Store) CreateComponent(ctx context.Context, c store.Component) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO components (`+componentColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.Name, c.Version, c.Description, jsonArg(c.Spec), c.CodeSnapshot, c.Hash, timeArg(c.Created))
	if isUnique(err) {
		return fmt.Errorf("component %s:%s: %w", c.Name, c.Version, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create component %s:%s: %w", c.Name, c.Version, err))
	}
	return nil
}

// GetComponent implements store.Assets.
func (s *Store) GetComponent(ctx context.Context, name, version string) (store.Component, error) {
	return componentTable.get(ctx, s.r, name, version)
}

// ListComponents implements store.Assets.
func (s *Store) ListComponents(ctx context.Context, name string) ([]store.Component, error) {
	return componentTable.list(ctx, s.r, name)
}
