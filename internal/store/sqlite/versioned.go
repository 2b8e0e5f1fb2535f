package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

// A versioned table holds named things registered in versions
// (environments, models, data assets): the same reads serve each, given its table,
// columns, the word for one in messages, and how a row is scanned.
type versioned[T any] struct {
	table, columns, what string
	scan                 func(scanner) (T, error)
}

var (
	environmentTable = versioned[store.Environment]{"environments", environmentColumns, "environment", scanEnvironment}
	modelTable       = versioned[store.Model]{"models", modelColumns, "model", scanModel}
	dataTable        = versioned[store.DataAsset]{"data_assets", dataColumns, "data asset", scanData}
)

// get reads one version; ErrNotFound if there is none.
func (v versioned[T]) get(ctx context.Context, db *sql.DB, name, version string) (T, error) {
	x, err := v.scan(db.QueryRowContext(ctx, `SELECT `+v.columns+` FROM `+v.table+` WHERE name = ? AND version = ?`, name, version))
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("%s %s:%s: %w", v.what, name, version, store.ErrNotFound)
	}
	if err != nil {
		return x, fmt.Errorf("get %s %s:%s: %w", v.what, name, version, err)
	}
	return x, nil
}

// list reads every version of name, or of all when name is empty,
// ordered by name and then by registration.
func (v versioned[T]) list(ctx context.Context, db *sql.DB, name string) ([]T, error) {
	q := `SELECT ` + v.columns + ` FROM ` + v.table
	var args []any
	if name != "" {
		q += ` WHERE name = ?`
		args = append(args, name)
	}
	rows, err := db.QueryContext(ctx, q+` ORDER BY name, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", v.what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		x, err := v.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list %ss: %w", v.what, err)
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
