package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// jobDataColumns are the columns of jobs other than seq and name, in the
// order of jobValues.
const jobDataColumns = `display_name, experiment_name, compute, status, status_reason,
	priority, attempt, exit_code, error, created_by, cancel_by, spec, code_snapshot,
	inputs, outputs, created, started, ended, heartbeat, environment, placement, handle`

// jobColumns are the columns of jobs in the order scanJob reads them.
const jobColumns = `seq, name, ` + jobDataColumns

// jobDataColumnNames are jobDataColumns one by one, in jobValues' order.
var jobDataColumnNames = strings.Split(strings.Join(strings.Fields(jobDataColumns), ""), ",")

// jobUpdate is the statement, and its arguments, that turns a job's row
// of values before into after (jobValues), row seq: it sets only the
// columns that change. SQLite rewrites the entry of every index with a
// column in the SET list, whether its value changed or not; a job's
// status changes rewrote its compute and experiment index entries too,
// two more pages in every commit's WAL frames (bench/dispatch). The
// texts are few (a job's changes follow a few patterns) and each is
// prepared after its first use (stmts.later).
func jobUpdate(before, after []any, seq int64) (string, []any) {
	var b strings.Builder
	b.WriteString("UPDATE jobs SET ")
	args := make([]any, 0, len(after)+1)
	for i, v := range after {
		if v == before[i] {
			continue
		}
		if len(args) > 0 {
			b.WriteString(", ")
		}
		b.WriteString(jobDataColumnNames[i] + " = ?")
		args = append(args, v)
	}
	b.WriteString(" WHERE seq = ?")
	return b.String(), append(args, seq)
}

// jobValues are the stored forms of j's fields after Seq and Name.
func jobValues(j store.Job) []any {
	var exit any
	if j.ExitCode != nil {
		exit = *j.ExitCode
	}
	return []any{
		j.DisplayName, j.ExperimentName, j.Compute, j.Status, j.StatusReason,
		j.Priority, j.Attempt, exit, j.Error, j.CreatedBy, j.CancelBy, jsonArg(j.Spec),
		j.CodeSnapshot, jsonArg(j.Inputs), jsonArg(j.Outputs),
		timeArg(j.Created), timeArg(j.Started), timeArg(j.Ended), timeArg(j.Heartbeat),
		jsonArg(j.Environment), jsonArg(j.Placement), j.Handle,
	}
}

func scanJob(s scanner) (store.Job, error) {
	var (
		j                                  store.Job
		exit                               sql.NullInt64
		spec, inputs, outputs, env, place  []byte
		created, started, ended, heartbeat sql.NullInt64
	)
	err := s.Scan(&j.Seq, &j.Name, &j.DisplayName, &j.ExperimentName, &j.Compute, &j.Status, &j.StatusReason,
		&j.Priority, &j.Attempt, &exit, &j.Error, &j.CreatedBy, &j.CancelBy, &spec, &j.CodeSnapshot,
		&inputs, &outputs, &created, &started, &ended, &heartbeat, &env, &place, &j.Handle)
	if err != nil {
		return store.Job{}, err
	}
	if exit.Valid {
		code := int(exit.Int64)
		j.ExitCode = &code
	}
	j.Spec, j.Inputs, j.Outputs, j.Environment, j.Placement = spec, inputs, outputs, env, place
	j.Created, j.Started, j.Ended, j.Heartbeat = timeOf(created), timeOf(started), timeOf(ended), timeOf(heartbeat)
	return j, nil
}

// normJob is j as it reads back after being stored.
func normJob(j store.Job) store.Job {
	if j.ExitCode != nil {
		code := *j.ExitCode
		j.ExitCode = &code
	}
	j.Created, j.Started, j.Ended, j.Heartbeat = normTime(j.Created), normTime(j.Started), normTime(j.Ended), normTime(j.Heartbeat)
	return j
}

// insertEvent stores e as the newest event of job; e.Job is ignored.
func (s *Store) insertEvent(ctx context.Context, tx *sql.Tx, job string, e store.Event) error {
	_, err := s.txExec(ctx, tx, s.w, qInsertEvent, job, timeArg(e.Time), e.From, e.To, e.Reason)
	return err
}

// CreateJob implements store.Jobs. j.Seq is ignored, and first is stored as
// an event of j whatever its Job field says.
func (s *Store) CreateJob(ctx context.Context, j store.Job, first store.Event) (store.Job, error) {
	err := s.write(ctx, func(tx *sql.Tx) error { return s.insertJob(ctx, tx, &j, first) })
	if err != nil {
		return store.Job{}, err
	}
	return normJob(j), nil
}

// insertJob stores a new job with its first event in tx and sets j.Seq.
func (s *Store) insertJob(ctx context.Context, tx *sql.Tx, j *store.Job, first store.Event) error {
	vals := jobValues(*j)
	err := s.txRow(ctx, tx, s.w, qInsertJob, append([]any{j.Name}, vals...)...).Scan(&j.Seq)
	if isUnique(err) {
		return fmt.Errorf("job %q: %w", j.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create job %q: %w", j.Name, err)
	}
	if err := s.insertEvent(ctx, tx, j.Name, first); err != nil {
		return fmt.Errorf("create job %q: first event: %w", j.Name, err)
	}
	return nil
}

// GetJob implements store.Jobs.
func (s *Store) GetJob(ctx context.Context, name string) (store.Job, error) {
	j, err := scanJob(s.readRow(ctx, qGetJob, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Job{}, fmt.Errorf("job %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("get job %q: %w", name, err)
	}
	return j, nil
}

// ListJobs implements store.Jobs. A Limit below zero means no limit, like
// zero. The result is empty, not nil, when no job matches.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, error) {
	var (
		where []string
		args  []any
	)
	if len(f.Statuses) > 0 {
		where = append(where, `status IN (?`+strings.Repeat(", ?", len(f.Statuses)-1)+`)`)
		for _, st := range f.Statuses {
			args = append(args, st)
		}
	}
	if f.Compute != "" {
		where = append(where, `compute = ?`)
		args = append(args, f.Compute)
	}
	if f.Experiment != "" {
		where = append(where, `experiment_name = ?`)
		args = append(args, f.Experiment)
	}
	if f.Before != "" {
		where = append(where, `seq < (SELECT seq FROM jobs WHERE name = ?)`)
		args = append(args, f.Before)
	}
	switch f.Handle {
	case store.HandleSet:
		where = append(where, `handle != ''`)
	case store.HandleUnset:
		where = append(where, `handle = ''`)
	}
	q := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	if f.ByPriority {
		q += ` ORDER BY priority DESC, seq`
	} else if f.Newest {
		q += ` ORDER BY seq DESC`
	} else {
		q += ` ORDER BY seq`
	}
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}

	rows, err := s.query(ctx, s.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	js := []store.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		js = append(js, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return js, nil
}

// CountJobs implements store.Jobs.
func (s *Store) CountJobs(ctx context.Context, statuses []string) (map[string]int, error) {
	q := `SELECT compute, count(*) FROM jobs`
	args := make([]any, len(statuses))
	if len(statuses) > 0 {
		q += ` WHERE status IN (?` + strings.Repeat(", ?", len(statuses)-1) + `)`
		for i, st := range statuses {
			args[i] = st
		}
	}
	rows, err := s.query(ctx, s.r, q+` GROUP BY compute`, args...)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var c string
		var n int
		if err := rows.Scan(&c, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		out[c] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return out, nil
}

// UpdateJob implements store.Jobs. Changes fn makes to Name and Seq are
// ignored, and the event it returns is stored as an event of this job
// whatever its Job field says.
func (s *Store) UpdateJob(ctx context.Context, name string, fn func(*store.Job) (*store.Event, error)) (store.Job, error) {
	return s.UpdateJobWith(ctx, name, func(j *store.Job) (store.JobChange, error) { return oneEvent(fn(j)) })
}

// UpdateJobWith implements store.Jobs. Its events are stored as events
// of this job whatever their Job fields say.
func (s *Store) UpdateJobWith(ctx context.Context, name string, fn func(*store.Job) (store.JobChange, error)) (store.Job, error) {
	var revoke string // the kind of tokens deleted, dropped from the cache
	defer func() {
		// After the transaction, even a failed one, as DeleteTokens does.
		if revoke != "" {
			s.tokens.revoke(revoke, name)
		}
	}()
	gen := s.tokens.generation()
	var out store.Job
	var created *store.Token
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		created = nil
		out, err = s.updateJob(ctx, tx, name, func(j *store.Job) (store.JobChange, error) {
			ch, err := fn(j)
			created = ch.CreateToken
			return ch, err
		}, &revoke)
		return err
	})
	if fe := (fnError{}); errors.As(err, &fe) {
		return store.Job{}, fe.err // as fn returned it
	}
	if err != nil {
		return store.Job{}, err
	}
	if created != nil && revoke == "" {
		s.tokens.made(*created, gen, time.Now())
	}
	return out, nil
}

// UpdateJobs implements store.Jobs, as UpdateJobWith does for each job.
func (s *Store) UpdateJobs(ctx context.Context, names []string, fn func(*store.Job) (store.JobChange, error)) ([]store.Job, []error, error) {
	jobs := make([]store.Job, len(names))
	errs := make([]error, len(names))
	revoke := make([]string, len(names)) // per job, the kind of tokens deleted
	defer func() {
		// After the transaction, even a failed one, as DeleteTokens does.
		for i, kind := range revoke {
			if kind != "" {
				s.tokens.revoke(kind, names[i])
			}
		}
	}()
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i, name := range names {
			var read store.Job
			jobs[i], errs[i] = s.updateJob(ctx, tx, name, func(j *store.Job) (store.JobChange, error) {
				read = *j
				return fn(j)
			}, &revoke[i])
			if errs[i] != nil {
				jobs[i] = normJob(read)
				// A failure of the database itself ends the transaction;
				// fn's own errors and a missing job are the job's alone.
				if fe := (fnError{}); errors.As(errs[i], &fe) {
					errs[i] = fe.err
				} else if !errors.Is(errs[i], store.ErrNotFound) {
					return errs[i]
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return jobs, errs, nil
}

// fnError wraps an error the update's function returned, so that it is
// told from the database's own; UpdateJob and UpdateJobs return the
// wrapped error as it was.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }
func (e fnError) Unwrap() error { return e.err }

// oneEvent is the JobChange of an update that stores at most one event.
func oneEvent(e *store.Event, err error) (store.JobChange, error) {
	if e == nil || err != nil {
		return store.JobChange{}, err
	}
	return store.JobChange{Events: []store.Event{*e}}, nil
}

// updateJob is UpdateJobWith's work inside the write transaction tx; an
// error fn returns comes back wrapped in fnError. The kind of tokens it
// deletes is left in *revoke, for the token cache to drop once the
// transaction is over.
func (s *Store) updateJob(ctx context.Context, tx *sql.Tx, name string, fn func(*store.Job) (store.JobChange, error), revoke *string) (store.Job, error) {
	j, err := scanJob(s.txRow(ctx, tx, s.w, qGetJob, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Job{Name: name}, fmt.Errorf("job %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("update job %q: %w", name, err)
	}
	seq := j.Seq
	before := jobValues(j)
	ch, err := fn(&j)
	if err != nil {
		return store.Job{}, fnError{err}
	}
	j.Name, j.Seq = name, seq
	// A row fn left as it was is not written again: callers that find
	// nothing to do (a resent report, an attempt already ended) would
	// otherwise each append a WAL frame of the whole row.
	if after := jobValues(j); !slices.Equal(before, after) {
		q, args := jobUpdate(before, after, seq)
		if _, err := s.txExec(ctx, tx, s.w, q, args...); err != nil {
			return store.Job{}, fmt.Errorf("update job %q: %w", name, err)
		}
		s.stmts.later(s.w, q)
	}
	for _, e := range ch.Events {
		if err := s.insertEvent(ctx, tx, name, e); err != nil {
			return store.Job{}, fmt.Errorf("update job %q: event: %w", name, err)
		}
	}
	if t := ch.CreateToken; t != nil {
		_, err := s.txExec(ctx, tx, s.w, qCreateToken, t.Hash, t.Kind, t.Subject, t.Attempt, timeArg(t.Created))
		if err := createTokenErr(*t, err); err != nil {
			return store.Job{}, fmt.Errorf("update job %q: %w", name, err)
		}
	}
	if kind := ch.DeleteTokens; kind != "" {
		*revoke = kind
		if _, err := s.txExec(ctx, tx, s.w, qDeleteTokens, kind, name); err != nil {
			return store.Job{}, fmt.Errorf("update job %q: delete %s tokens: %w", name, kind, err)
		}
	}
	return normJob(j), nil
}

// jobExists returns ErrNotFound, wrapped, if there is no job by that name.
// tx is a transaction of db.
func (s *Store) jobExists(ctx context.Context, tx *sql.Tx, db *sql.DB, job string) error {
	var n int
	if err := s.txRow(ctx, tx, db, qJobExists, job).Scan(&n); err != nil {
		return fmt.Errorf("job %q: %w", job, err)
	}
	if n == 0 {
		return fmt.Errorf("job %q: %w", job, store.ErrNotFound)
	}
	return nil
}

// ListEvents implements store.Jobs. It returns ErrNotFound if there is no
// such job, and an empty, non-nil slice for a job without events.
func (s *Store) ListEvents(ctx context.Context, job string) ([]store.Event, error) {
	es := []store.Event{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := s.jobExists(ctx, tx, s.r, job); err != nil {
			return err
		}
		rows, err := s.txQuery(ctx, tx, s.r, qListEvents, job)
		if err != nil {
			return fmt.Errorf("list events of job %q: %w", job, err)
		}
		defer rows.Close()
		for rows.Next() {
			e := store.Event{Job: job}
			var t sql.NullInt64
			if err := rows.Scan(&t, &e.From, &e.To, &e.Reason); err != nil {
				return fmt.Errorf("list events of job %q: %w", job, err)
			}
			e.Time = timeOf(t)
			es = append(es, e)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list events of job %q: %w", job, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return es, nil
}
