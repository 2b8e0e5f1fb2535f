package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/store"
)

// nodeDataColumns are the columns of nodes other than name, in the order of
// nodeValues.
const nodeDataColumns = `compute, state, reason, size, machine, address, facts,
	created, joined, heartbeat, idle_since`

// nodeColumns are the columns of nodes in the order scanNode reads them.
const nodeColumns = `name, ` + nodeDataColumns

// nodeSets assigns nodeValues to nodeDataColumns.
const nodeSets = `compute = ?, state = ?, reason = ?, size = ?, machine = ?, address = ?, facts = ?,
	created = ?, joined = ?, heartbeat = ?, idle_since = ?`

// nodeValues are the stored forms of n's fields after Name.
func nodeValues(n store.Node) []any {
	return []any{
		n.Compute, n.State, n.Reason, n.Size, n.Machine, n.Address, jsonArg(n.Facts),
		timeArg(n.Created), timeArg(n.Joined), timeArg(n.Heartbeat), timeArg(n.IdleSince),
	}
}

func scanNode(s scanner) (store.Node, error) {
	var (
		n                                store.Node
		facts                            []byte
		created, joined, heartbeat, idle sql.NullInt64
	)
	if err := s.Scan(&n.Name, &n.Compute, &n.State, &n.Reason, &n.Size, &n.Machine, &n.Address, &facts,
		&created, &joined, &heartbeat, &idle); err != nil {
		return store.Node{}, err
	}
	n.Facts = facts
	n.Created, n.Joined, n.Heartbeat, n.IdleSince = timeOf(created), timeOf(joined), timeOf(heartbeat), timeOf(idle)
	return n, nil
}

// normNode is n as it reads back after being stored.
func normNode(n store.Node) store.Node {
	n.Created, n.Joined, n.Heartbeat, n.IdleSince = normTime(n.Created), normTime(n.Joined), normTime(n.Heartbeat), normTime(n.IdleSince)
	return n
}

// CreateNode implements store.Computes.
func (s *Store) CreateNode(ctx context.Context, n store.Node) error {
	vals := nodeValues(n)
	_, err := s.w.ExecContext(ctx, `INSERT INTO nodes (`+nodeColumns+`) VALUES (?`+strings.Repeat(", ?", len(vals))+`)`,
		append([]any{n.Name}, vals...)...)
	if isUnique(err) {
		return fmt.Errorf("node %q: %w", n.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create node %q: %w", n.Name, err)
	}
	return nil
}

// GetNode implements store.Computes.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	n, err := scanNode(s.readRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Node{}, fmt.Errorf("node %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %q: %w", name, err)
	}
	return n, nil
}

// ListNodes implements store.Computes. A node whose Created is zero (NULL)
// sorts first, as the zero time is the earliest. The result is empty, not
// nil, when there are no nodes.
func (s *Store) ListNodes(ctx context.Context, compute string) ([]store.Node, error) {
	q := `SELECT ` + nodeColumns + ` FROM nodes`
	var args []any
	if compute != "" {
		q += ` WHERE compute = ?`
		args = append(args, compute)
	}
	rows, err := s.query(ctx, s.r, q+` ORDER BY created, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	ns := []store.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		ns = append(ns, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return ns, nil
}

// UpdateNode implements store.Computes. A change fn makes to Name is ignored:
// the node keeps its name. Updates are serialised by the single write
// connection.
func (s *Store) UpdateNode(ctx context.Context, name string, fn func(*store.Node) error) (store.Node, error) {
	var out store.Node
	err := s.write(ctx, func(tx *sql.Tx) error {
		n, err := scanNode(tx.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("node %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update node %q: %w", name, err)
		}
		if err := fn(&n); err != nil {
			return err
		}
		n.Name = name
		if _, err := tx.ExecContext(ctx, `UPDATE nodes SET `+nodeSets+` WHERE name = ?`, append(nodeValues(n), name)...); err != nil {
			return fmt.Errorf("update node %q: %w", name, err)
		}
		out = normNode(n)
		return nil
	})
	if err != nil {
		return store.Node{}, err
	}
	return out, nil
}

// DeleteNode implements store.Computes.
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM nodes WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("node %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// AddComputeEvent implements store.Computes.
func (s *Store) AddComputeEvent(ctx context.Context, e store.ComputeEvent) error {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO compute_events (compute, time, kind, message) VALUES (?, ?, ?, ?)`,
		e.Compute, timeArg(e.Time), e.Kind, e.Message); err != nil {
		return fmt.Errorf("add %s event of compute %q: %w", e.Kind, e.Compute, err)
	}
	return nil
}

// ListComputeEvents implements store.Computes. Events with a zero Time (NULL)
// are the oldest. The newest limit are picked in descending order and
// reversed, so the LIMIT can use the index.
func (s *Store) ListComputeEvents(ctx context.Context, compute string, limit int) ([]store.ComputeEvent, error) {
	q := `SELECT time, kind, message FROM compute_events WHERE compute = ? ORDER BY time DESC, id DESC`
	args := []any{compute}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of compute %q: %w", compute, err)
	}
	defer rows.Close()
	es := []store.ComputeEvent{}
	for rows.Next() {
		e := store.ComputeEvent{Compute: compute}
		var t sql.NullInt64
		if err := rows.Scan(&t, &e.Kind, &e.Message); err != nil {
			return nil, fmt.Errorf("list events of compute %q: %w", compute, err)
		}
		e.Time = timeOf(t)
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of compute %q: %w", compute, err)
	}
	slices.Reverse(es)
	return es, nil
}
