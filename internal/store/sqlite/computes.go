package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

const computeColumns = `name, type, spec, state, created, modified, status`

func scanCompute(s scanner) (store.Compute, error) {
	var (
		c                 store.Compute
		spec, status      []byte
		created, modified sql.NullInt64
	)
	if err := s.Scan(&c.Name, &c.Type, &spec, &c.State, &created, &modified, &status); err != nil {
		return store.Compute{}, err
	}
	c.Spec = spec
	if len(status) > 0 {
		c.Status = status
	}
	c.Created = timeOf(created)
	c.Modified = timeOf(modified)
	return c, nil
}

// normCompute is c as it reads back after being stored.
func normCompute(c store.Compute) store.Compute {
	c.Created = normTime(c.Created)
	c.Modified = normTime(c.Modified)
	return c
}

// CreateCompute implements store.Store.
func (s *Store) CreateCompute(ctx context.Context, c store.Compute) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO computes (`+computeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.Name, c.Type, jsonArg(c.Spec), c.State, timeArg(c.Created), timeArg(c.Modified), jsonArg(c.Status))
	if isUnique(err) {
		return fmt.Errorf("compute %q: %w", c.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create compute %q: %w", c.Name, err)
	}
	return nil
}

// GetCompute implements store.Store.
func (s *Store) GetCompute(ctx context.Context, name string) (store.Compute, error) {
	c, err := scanCompute(s.readRow(ctx, `SELECT `+computeColumns+` FROM computes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Compute{}, fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Compute{}, fmt.Errorf("get compute %q: %w", name, err)
	}
	return c, nil
}

// ListComputes implements store.Store. The result is empty, not nil, when
// there are no targets.
func (s *Store) ListComputes(ctx context.Context) ([]store.Compute, error) {
	rows, err := s.query(ctx, s.r, `SELECT `+computeColumns+` FROM computes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list computes: %w", err)
	}
	defer rows.Close()
	cs := []store.Compute{}
	for rows.Next() {
		c, err := scanCompute(rows)
		if err != nil {
			return nil, fmt.Errorf("list computes: %w", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list computes: %w", err)
	}
	return cs, nil
}

// UpdateCompute implements store.Store. A change fn makes to Name is
// ignored: the target keeps its name.
func (s *Store) UpdateCompute(ctx context.Context, name string, fn func(*store.Compute) error) (store.Compute, error) {
	var out store.Compute
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := scanCompute(tx.QueryRowContext(ctx, `SELECT `+computeColumns+` FROM computes WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update compute %q: %w", name, err)
		}
		if err := fn(&c); err != nil {
			return err
		}
		c.Name = name
		if _, err := tx.ExecContext(ctx, `UPDATE computes SET type = ?, spec = ?, state = ?, created = ?, modified = ?, status = ? WHERE name = ?`,
			c.Type, jsonArg(c.Spec), c.State, timeArg(c.Created), timeArg(c.Modified), jsonArg(c.Status), name); err != nil {
			return fmt.Errorf("update compute %q: %w", name, err)
		}
		out = normCompute(c)
		return nil
	})
	if err != nil {
		return store.Compute{}, err
	}
	return out, nil
}

// DeleteCompute implements store.Store.
func (s *Store) DeleteCompute(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM computes WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete compute %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete compute %q: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("compute %q: %w", name, store.ErrNotFound)
	}
	return nil
}
