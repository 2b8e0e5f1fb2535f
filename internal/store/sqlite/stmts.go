package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// stmts caches the prepared statements of the store's hottest queries, one
// per connection pool and query text. SQLite parses and plans a statement
// on every call that is not prepared; under many API clients that parsing
// was about a fifth of the server's CPU. database/sql prepares a cached
// statement once per connection and reuses it after.
type stmts struct {
	mu sync.Mutex
	m  map[stmtKey]*sql.Stmt
}

type stmtKey struct {
	db    *sql.DB
	query string
}

// The queries prepared when the store opens, on the pool that runs them.
// A statement is prepared while no transaction holds a connection: the
// writer pool has one connection, so preparing on it from inside a write
// would wait for itself. Inside a transaction, database/sql then prepares
// the statement on that transaction's connection the first time and keeps
// it for the connection's life.
const (
	qGetJob        = `SELECT ` + jobColumns + ` FROM jobs WHERE name = ?`
	qJobExists     = `SELECT count(*) FROM jobs WHERE name = ?`
	qUpdateJob     = `UPDATE jobs SET ` + jobSets + ` WHERE seq = ?`
	qListEvents    = `SELECT time, from_status, to_status, reason FROM events WHERE job = ? ORDER BY id`
	qLatestMetrics = `SELECT name, value, step, time FROM metrics
			WHERE id IN (SELECT max(id) FROM metrics WHERE job = ? GROUP BY name)`
	qAddMetric   = `INSERT INTO metrics (job, name, value, step, time) VALUES (?, ?, ?, ?, ?)`
	qTokenByHash = `SELECT hash, kind, subject, attempt, created FROM tokens WHERE hash = ?`
)

var (
	readQueries  = []string{qGetJob, qJobExists, qListEvents, qLatestMetrics, qTokenByHash}
	writeQueries = []string{qGetJob, qJobExists, qUpdateJob, qAddMetric}
)

// prepare prepares queries on db.
func (c *stmts) prepare(ctx context.Context, db *sql.DB, queries []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[stmtKey]*sql.Stmt{}
	}
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		c.m[stmtKey{db, q}] = st
	}
	return nil
}

// get returns db's prepared statement for query, or nil when it was not
// prepared at open: the caller then runs the query unprepared.
func (c *stmts) get(db *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[stmtKey{db, query}]
}

func (c *stmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, k)
	}
	return errors.Join(errs...)
}

// readRow runs a one-row query on the reader pool, prepared.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := s.stmts.get(s.r, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.r.QueryRowContext(ctx, query, args...)
}

// txRow runs a one-row query in tx, a transaction of db, prepared.
func (s *Store) txRow(ctx context.Context, tx *sql.Tx, db *sql.DB, query string, args ...any) *sql.Row {
	if st := s.stmts.get(db, query); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

// txQuery runs a query in tx, a transaction of db, prepared.
func (s *Store) txQuery(ctx context.Context, tx *sql.Tx, db *sql.DB, query string, args ...any) (*sql.Rows, error) {
	if st := s.stmts.get(db, query); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, query, args...)
}

// txExec runs a statement in tx, a transaction of db, prepared.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, db *sql.DB, query string, args ...any) (sql.Result, error) {
	if st := s.stmts.get(db, query); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}
