package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const datastoreColumns = `name, type, spec, created, updated`

func scanDatastore(s scanner) (store.Datastore, error) {
	var (
		d                store.Datastore
		spec             string
		created, updated sql.NullInt64
	)
	if err := s.Scan(&d.Name, &d.Type, &spec, &created, &updated); err != nil {
		return store.Datastore{}, err
	}
	d.Spec, d.Created, d.Updated = []byte(spec), timeOf(created), timeOf(updated)
	return d, nil
}

// PutDatastore implements store.Datastores.
func (s *Store) PutDatastore(ctx context.Context, d store.Datastore) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO datastores (`+datastoreColumns+`) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET type = excluded.type, spec = excluded.spec, updated = excluded.updated`,
		d.Name, d.Type, string(d.Spec), timeArg(d.Created), timeArg(d.Updated))
	if err != nil {
		return full(fmt.Errorf("put datastore %s: %w", d.Name, err))
	}
	return nil
}

// GetDatastore implements store.Datastores.
func (s *Store) GetDatastore(ctx context.Context, name string) (store.Datastore, error) {
	d, err := scanDatastore(s.r.QueryRowContext(ctx, `SELECT `+datastoreColumns+` FROM datastores WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Datastore{}, fmt.Errorf("datastore %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Datastore{}, fmt.Errorf("get datastore %s: %w", name, err)
	}
	return d, nil
}

// ListDatastores implements store.Datastores.
func (s *Store) ListDatastores(ctx context.Context) ([]store.Datastore, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+datastoreColumns+` FROM datastores ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list datastores: %w", err)
	}
	defer rows.Close()
	out := []store.Datastore{}
	for rows.Next() {
		d, err := scanDatastore(rows)
		if err != nil {
			return nil, fmt.Errorf("list datastores: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeleteDatastore implements store.Datastores.
func (s *Store) DeleteDatastore(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM datastores WHERE name = ?`, name)
	if err != nil {
		return full(fmt.Errorf("delete datastore %s: %w", name, err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete datastore %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("datastore %s: %w", name, store.ErrNotFound)
	}
	return nil
}
