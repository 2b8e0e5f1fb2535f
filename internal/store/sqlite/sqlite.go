// Package sqlite is the default implementation of store.Store: one SQLite
// database file, opened with the pure-Go driver modernc.org/sqlite (no cgo).
//
// The database runs in WAL mode with synchronous=NORMAL: a transaction that
// has committed survives the process being killed; only a power loss or an
// operating system crash can roll back the last few commits. Foreign keys are
// on and a busy timeout covers other processes that open the same file.
//
// Times are stored as microseconds since the Unix epoch and read back in UTC,
// so a stored time equals what was given, truncated to the microsecond. The
// zero time.Time is stored as NULL and read back as the zero time.
//
// The schema is created and upgraded by the embedded migrations/*.sql files,
// applied in order by Open and recorded in the schema_migrations table.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ferry-ml/ferry/internal/store"
)

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a statement waits for a lock that another process
// holds before it fails with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Store is a store.Store kept in one SQLite database file.
//
// It holds two connection pools on that file. Every write goes through w, a
// pool of exactly one connection whose transactions begin IMMEDIATE: writers
// of this process queue in database/sql for that connection instead of
// colliding inside SQLite, so a read-modify-write (UpdateJob) can never fail
// with SQLITE_BUSY or deadlock on a lock upgrade, and concurrent updates of
// one job are serialised. IMMEDIATE still matters for writers in other
// processes, which then wait under the busy timeout. Reads go through r,
// several query-only connections that WAL lets run beside the writer; a read
// that needs more than one statement runs in a (deferred) read transaction and
// so sees one snapshot.
//
// Functions passed to UpdateJob and UpdateCompute run while the write
// connection is held, so they must not write through the same Store: that
// would wait for the connection forever. Reading through it is fine.
type Store struct {
	w        *sql.DB
	r        *sql.DB
	stmts    stmts        // prepared statements (stmts.go)
	tokens   tokenCache   // tokens found by hash (tokens.go)
	computes computeCache // the list of computes (computes.go)
}

// Open opens the SQLite database at path, creating the file if it does not
// exist, and applies the migrations it has not seen yet.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite store: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	ctx := context.Background()

	w, err := sql.Open("sqlite", dsn(abs, url.Values{
		"_txlock":       {"immediate"},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"NORMAL"},
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := checkWAL(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	if err := migrate(ctx, w, migrations()); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}

	// The reader pool is opened after the writer has created the file and
	// switched it to WAL, which is a persistent property of the file.
	r, err := sql.Open("sqlite", dsn(abs, url.Values{"_query_only": {"1"}}))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	st := &Store{w: w, r: r}
	if err := errors.Join(st.stmts.prepare(ctx, w, writeQueries), st.stmts.prepare(ctx, r, readQueries)); err != nil {
		st.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	return st, nil
}

// dsn builds a file: URI for an absolute path, so that characters such as
// '?' and '#' in the path are escaped, with the settings every connection
// shares plus extra.
func dsn(abs string, extra url.Values) string {
	q := url.Values{
		"_busy_timeout": {fmt.Sprint(busyTimeout.Milliseconds())},
		"_foreign_keys": {"1"},
	}
	for k, v := range extra {
		q[k] = v
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}
	return u.String()
}

// checkWAL fails when SQLite silently kept another journal mode (some file
// systems cannot hold a WAL), because the durability and concurrency this
// package promises depend on it.
func checkWAL(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal (is the file on a network file system?)", mode)
	}
	return nil
}

// Close closes both connection pools.
func (s *Store) Close() error {
	return errors.Join(s.stmts.close(), s.r.Close(), s.w.Close())
}

// write runs f in an IMMEDIATE transaction on the write connection and
// commits it if f returns nil. f's error is returned unchanged.
func (s *Store) write(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return full(err)
	}
	if err := tx.Commit(); err != nil {
		return full(fmt.Errorf("commit: %w", err))
	}
	s.stmts.preparePending(ctx, s.w)
	return nil
}

// full marks an error of a write that failed for want of disk space with
// store.ErrNoSpace, so that it is answered as such and not as a bug.
func full(err error) error {
	var e *sqlite.Error
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		(errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_FULL) {
		return fmt.Errorf("%w: %w", store.ErrNoSpace, err)
	}
	return err
}

// read runs f in a read transaction, which sees one snapshot of the database.
func (s *Store) read(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	return f(tx)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// timeArg is how a time is stored: NULL for the zero time, else
// microseconds since the Unix epoch.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// timeOf reads back what timeArg stored.
func timeOf(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// normTime is t as it reads back after being stored.
func normTime(t time.Time) time.Time {
	return timeOf(sql.NullInt64{Int64: t.UnixMicro(), Valid: !t.IsZero()})
}

// jsonArg is how a JSON document is stored: NULL for nil, else its bytes as
// TEXT, so the document stays readable with the sqlite3 shell.
func jsonArg(raw []byte) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

// floatArg is how a metric value is stored. SQLite turns a NaN into NULL by
// itself; doing it here keeps that visible.
func floatArg(f float64) any {
	if math.IsNaN(f) {
		return nil
	}
	return f
}

// floatOf reads back what floatArg stored.
func floatOf(v sql.NullFloat64) float64 {
	if !v.Valid {
		return math.NaN()
	}
	return v.Float64
}
