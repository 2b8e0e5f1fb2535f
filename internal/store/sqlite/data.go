package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const dataColumns = `name, version, type, description, spec, snapshot, hash, archived, created`

func scanData(s scanner) (store.DataAsset, error) {
	var (
		d        store.DataAsset
		spec     []byte
		archived int
		created  sql.NullInt64
	)
	if err := s.Scan(&d.Name, &d.Version, &d.Type, &d.Description, &spec, &d.Snapshot, &d.Hash, &archived, &created); err != nil {
		return store.DataAsset{}, err
	}
	d.Spec, d.Archived, d.Created = spec, archived != 0, timeOf(created)
	return d, nil
}

// CreateData implements store.Assets.
func (s *Store) CreateData(ctx context.Context, d store.DataAsset) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO data_assets (`+dataColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.Name, d.Version, d.Type, d.Description, jsonArg(d.Spec), d.Snapshot, d.Hash, boolArg(d.Archived), timeArg(d.Created))
	if isUnique(err) {
		return fmt.Errorf("data asset %s:%s: %w", d.Name, d.Version, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create data asset %s:%s: %w", d.Name, d.Version, err))
	}
	return nil
}

// GetData implements store.Assets.
func (s *Store) GetData(ctx context.Context, name, version string) (store.DataAsset, error) {
	return dataTable.get(ctx, s.r, name, version)
}

// ListData implements store.Assets.
func (s *Store) ListData(ctx context.Context, name string) ([]store.DataAsset, error) {
	return dataTable.list(ctx, s.r, name)
}

// SetDataArchived implements store.Assets.
func (s *Store) SetDataArchived(ctx context.Context, name, version string, archived bool) (store.DataAsset, error) {
	var out store.DataAsset
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE data_assets SET archived = ? WHERE name = ? AND version = ?`, boolArg(archived), name, version)
		if err != nil {
			return fmt.Errorf("archive data asset %s:%s: %w", name, version, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("archive data asset %s:%s: %w", name, version, err)
		} else if n == 0 {
			return fmt.Errorf("data asset %s:%s: %w", name, version, store.ErrNotFound)
		}
		out, err = scanData(tx.QueryRowContext(ctx, `SELECT `+dataColumns+` FROM data_assets WHERE name = ? AND version = ?`, name, version))
		if err != nil {
			return fmt.Errorf("archive data asset %s:%s: %w", name, version, err)
		}
		return nil
	})
	if err != nil {
		return store.DataAsset{}, err
	}
	return out, nil
}
