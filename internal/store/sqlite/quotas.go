package sqlite

import (
	"context"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

// SetQuota implements store.Quotas.
func (s *Store) SetQuota(ctx context.Context, family string, cores int) error {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO quotas (family, cores) VALUES (?, ?)
		ON CONFLICT (family) DO UPDATE SET cores = excluded.cores`, family, cores); err != nil {
		return fmt.Errorf("set quota of %q: %w", family, err)
	}
	return nil
}

// DeleteQuota implements store.Quotas.
func (s *Store) DeleteQuota(ctx context.Context, family string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM quotas WHERE family = ?`, family)
	if err != nil {
		return fmt.Errorf("delete quota of %q: %w", family, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete quota of %q: %w", family, err)
	}
	if n == 0 {
		return fmt.Errorf("quota of %q: %w", family, store.ErrNotFound)
	}
	return nil
}

// ListQuotas implements store.Quotas. The map is empty, not nil, when no
// quota is set.
func (s *Store) ListQuotas(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT family, cores FROM quotas`)
	if err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	defer rows.Close()
	qs := map[string]int{}
	for rows.Next() {
		var (
			family string
			cores  int
		)
		if err := rows.Scan(&family, &cores); err != nil {
			return nil, fmt.Errorf("list quotas: %w", err)
		}
		qs[family] = cores
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	return qs, nil
}

// SetSizeEnabled implements store.Quotas.
func (s *Store) SetSizeEnabled(ctx context.Context, size string, enabled bool) error {
	q := `DELETE FROM enabled_sizes WHERE size = ?`
	if enabled {
		q = `INSERT INTO enabled_sizes (size) VALUES (?) ON CONFLICT (size) DO NOTHING`
	}
	if _, err := s.w.ExecContext(ctx, q, size); err != nil {
		return fmt.Errorf("set size %q enabled=%t: %w", size, enabled, err)
	}
	return nil
}

// ListEnabledSizes implements store.Quotas. SQLite's default BINARY
// collation orders the names as Go's sort.Strings does. The result is empty,
// not nil, when no size is enabled.
func (s *Store) ListEnabledSizes(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT size FROM enabled_sizes ORDER BY size`)
	if err != nil {
		return nil, fmt.Errorf("list enabled sizes: %w", err)
	}
	defer rows.Close()
	sizes := []string{}
	for rows.Next() {
		var size string
		if err := rows.Scan(&size); err != nil {
			return nil, fmt.Errorf("list enabled sizes: %w", err)
		}
		sizes = append(sizes, size)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list enabled sizes: %w", err)
	}
	return sizes, nil
}
