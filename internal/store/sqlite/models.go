package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const modelColumns = `name, version, type, description, spec, snapshot, hash, archived, created`

func scanModel(s scanner) (store.Model, error) {
	var (
		m        store.Model
		spec     []byte
		archived int
		created  sql.NullInt64
	)
	if err := s.Scan(&m.Name, &m.Version, &m.Type, &m.Description, &spec, &m.Snapshot, &m.Hash, &archived, &created); err != nil {
		return store.Model{}, err
	}
	m.Spec, m.Archived, m.Created = spec, archived != 0, timeOf(created)
	return m, nil
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CreateModel implements store.Assets.
func (s *Store) CreateModel(ctx context.Context, m store.Model) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO models (`+modelColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.Name, m.Version, m.Type, m.Description, jsonArg(m.Spec), m.Snapshot, m.Hash, boolArg(m.Archived), timeArg(m.Created))
	if isUnique(err) {
		return fmt.Errorf("model %s:%s: %w", m.Name, m.Version, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create model %s:%s: %w", m.Name, m.Version, err))
	}
	return nil
}

// GetModel implements store.Assets.
func (s *Store) GetModel(ctx context.Context, name, version string) (store.Model, error) {
	return modelTable.get(ctx, s.r, name, version)
}

// ListModels implements store.Assets.
func (s *Store) ListModels(ctx context.Context, name string) ([]store.Model, error) {
	return modelTable.list(ctx, s.r, name)
}

// SetModelArchived implements store.Assets.
func (s *Store) SetModelArchived(ctx context.Context, name, version string, archived bool) (store.Model, error) {
	var out store.Model
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE models SET archived = ? WHERE name = ? AND version = ?`, boolArg(archived), name, version)
		if err != nil {
			return fmt.Errorf("archive model %s:%s: %w", name, version, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("archive model %s:%s: %w", name, version, err)
		} else if n == 0 {
			return fmt.Errorf("model %s:%s: %w", name, version, store.ErrNotFound)
		}
		out, err = scanModel(tx.QueryRowContext(ctx, `SELECT `+modelColumns+` FROM models WHERE name = ? AND version = ?`, name, version))
		if err != nil {
			return fmt.Errorf("archive model %s:%s: %w", name, version, err)
		}
		return nil
	})
	if err != nil {
		return store.Model{}, err
	}
	return out, nil
}
