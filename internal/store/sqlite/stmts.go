package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// stmts caches prepared statements, one per connection pool and query
// text. SQLite parses and plans a statement on every call that is not
// prepared; under many API clients that parsing was about a fifth of the
// server's CPU, and under bench/dispatch the statements that were still
// parsed per call (the dispatcher's lists, events, tokens) an eighth.
// database/sql prepares a cached statement once per connection and reuses
// it after.
//
// A statement is prepared either at open (the ones used inside write
// transactions) or on its first use outside a transaction (everything else
// that goes through query, row or exec). A statement is prepared only while
// the caller holds no connection of its pool: the writer pool has one
// connection, so preparing on it from inside a write would wait for itself.
// Inside a transaction, database/sql then prepares the statement on that
// transaction's connection the first time and keeps it for the
// connection's life.
type stmts struct {
	mu   sync.Mutex
	m    map[stmtKey]*sql.Stmt
	lazy int // statements prepared on first use, bounded by maxLazyStmts
	// pending are the writer's statements run unprepared inside a write
	// transaction, to prepare once it is over (later, preparePending).
	pending map[string]bool
}

type stmtKey struct {
	db    *sql.DB
	query string
}

// maxLazyStmts bounds the statements prepared on first use. Query texts
// are built from filters (ListJobs: one placeholder per status asked for),
// so a client could otherwise make the cache grow without end; past the
// bound, a new text runs unprepared.
const maxLazyStmts = 256

// The queries prepared when the store opens, on the pool that runs them.
const (
	qGetJob        = `SELECT ` + jobColumns + ` FROM jobs WHERE name = ?`
	qJobExists     = `SELECT count(*) FROM jobs WHERE name = ?`
	qInsertEvent   = `INSERT INTO events (job, time, from_status, to_status, reason) VALUES (?, ?, ?, ?, ?)`
	qListEvents    = `SELECT time, from_status, to_status, reason FROM events WHERE job = ? ORDER BY id`
	qLatestMetrics = `SELECT name, value, step, time FROM metrics
			WHERE id IN (SELECT max(id) FROM metrics WHERE job = ? GROUP BY name)`
	qAddMetric    = `INSERT INTO metrics (job, name, value, step, time) VALUES (?, ?, ?, ?, ?)`
	qTokenByHash  = `SELECT hash, kind, subject, attempt, created FROM tokens WHERE hash = ?`
	qCreateToken  = `INSERT INTO tokens (hash, kind, subject, attempt, created) VALUES (?, ?, ?, ?, ?)`
	qDeleteTokens = `DELETE FROM tokens WHERE kind = ? AND subject = ?`
)

var (
	// qInsertJob is every submit's insert: parsing it was a fifth of the
	// submit's CPU (bench/dispatch, tenth round).
	qInsertJob = `INSERT INTO jobs (name, ` + jobDataColumns + `)
		VALUES (?` + strings.Repeat(", ?", len(jobDataColumnNames)) + `) RETURNING seq`

	readQueries  = []string{qGetJob, qJobExists, qListEvents, qLatestMetrics, qTokenByHash}
	writeQueries = []string{qGetJob, qJobExists, qInsertEvent, qInsertJob, qAddMetric, qCreateToken, qDeleteTokens}
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
// prepared yet: the caller then runs the query unprepared.
func (c *stmts) get(db *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[stmtKey{db, query}]
}

// getOrPrepare returns db's prepared statement for query, preparing it
// first if it is new and the bound allows; nil means run it unprepared.
// The caller must hold no connection of db (see stmts).
func (c *stmts) getOrPrepare(ctx context.Context, db *sql.DB, query string) *sql.Stmt {
	k := stmtKey{db, query}
	c.mu.Lock()
	st, full := c.m[k], c.lazy >= maxLazyStmts || c.m == nil
	c.mu.Unlock()
	if st != nil || full {
		return st
	}
	// Prepared without the lock, which would otherwise make every lookup
	// wait for a connection of the pool.
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil // the unprepared run reports the error
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[k]; old != nil || c.m == nil {
		st.Close() // prepared beside us, or the store closed meanwhile
		return old
	}
	c.m[k] = st
	c.lazy++
	return st
}

// later asks for query, a statement of db (the writer) run inside a
// write transaction, to be prepared after the transaction if it is not
// yet: inside it, the writer's one connection is the transaction's.
func (c *stmts) later(db *sql.DB, query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.lazy >= maxLazyStmts || c.m[stmtKey{db, query}] != nil {
		return
	}
	if c.pending == nil {
		c.pending = map[string]bool{}
	}
	c.pending[query] = true
}

// preparePending prepares, on db (the writer), the statements later asked
// for. The caller holds no connection of db.
func (c *stmts) preparePending(ctx context.Context, db *sql.DB) {
	c.mu.Lock()
	queries := slices.Collect(maps.Keys(c.pending))
	clear(c.pending)
	c.mu.Unlock()
	for _, q := range queries {
		c.getOrPrepare(ctx, db, q) // it prepares only what is not yet
	}
}

func (c *stmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, k)
	}
	c.m = nil
	return errors.Join(errs...)
}

// query runs a query outside any transaction on db, prepared.
func (s *Store) query(ctx context.Context, db *sql.DB, query string, args ...any) (*sql.Rows, error) {
	if st := s.stmts.getOrPrepare(ctx, db, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return db.QueryContext(ctx, query, args...)
}

// row runs a one-row query outside any transaction on db, prepared.
func (s *Store) row(ctx context.Context, db *sql.DB, query string, args ...any) *sql.Row {
	if st := s.stmts.getOrPrepare(ctx, db, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, query, args...)
}

// exec runs a statement outside any transaction on db, prepared.
func (s *Store) exec(ctx context.Context, db *sql.DB, query string, args ...any) (sql.Result, error) {
	if st := s.stmts.getOrPrepare(ctx, db, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, query, args...)
}

// readRow runs a one-row query on the reader pool, prepared.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	return s.row(ctx, s.r, query, args...)
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
