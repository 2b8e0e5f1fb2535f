package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

const scheduleColumns = `name, spec, job, enabled, next_fire, last_fired, last_job, last_error, created_by, created, updated`

func scanSchedule(s scanner) (store.Schedule, error) {
	var (
		sc                           store.Schedule
		spec, job                    []byte
		enabled                      int
		next, last, created, updated sql.NullInt64
	)
	if err := s.Scan(&sc.Name, &spec, &job, &enabled, &next, &last, &sc.LastJob, &sc.LastError, &sc.CreatedBy, &created, &updated); err != nil {
		return store.Schedule{}, err
	}
	sc.Spec, sc.Job, sc.Enabled = spec, job, enabled != 0
	sc.NextFire, sc.LastFired, sc.Created, sc.Updated = timeOf(next), timeOf(last), timeOf(created), timeOf(updated)
	return sc, nil
}

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO schedules (`+scheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sc.Name, jsonArg(sc.Spec), jsonArg(sc.Job), boolArg(sc.Enabled), timeArg(sc.NextFire), timeArg(sc.LastFired),
		sc.LastJob, sc.LastError, sc.CreatedBy, timeArg(sc.Created), timeArg(sc.Updated))
	if isUnique(err) {
		return fmt.Errorf("schedule %s: %w", sc.Name, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("create schedule %s: %w", sc.Name, err))
	}
	return nil
}

// GetSchedule implements store.Schedules.
func (s *Store) GetSchedule(ctx context.Context, name string) (store.Schedule, error) {
	return getSchedule(ctx, s.r, name)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getSchedule(ctx context.Context, q queryRower, name string) (store.Schedule, error) {
	sc, err := scanSchedule(q.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("schedule %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Schedule{}, fmt.Errorf("get schedule %s: %w", name, err)
	}
	return sc, nil
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context) ([]store.Schedule, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+scheduleColumns+` FROM schedules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	defer rows.Close()
	out := []store.Schedule{}
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// putSchedule writes every field of sc but name and created.
func putSchedule(ctx context.Context, tx *sql.Tx, sc store.Schedule) error {
	_, err := tx.ExecContext(ctx, `UPDATE schedules SET spec = ?, job = ?, enabled = ?, next_fire = ?, last_fired = ?,
		last_job = ?, last_error = ?, created_by = ?, updated = ? WHERE name = ?`,
		jsonArg(sc.Spec), jsonArg(sc.Job), boolArg(sc.Enabled), timeArg(sc.NextFire), timeArg(sc.LastFired),
		sc.LastJob, sc.LastError, sc.CreatedBy, timeArg(sc.Updated), sc.Name)
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", sc.Name, err)
	}
	return nil
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, name string, fn func(*store.Schedule) error) (store.Schedule, error) {
	var out store.Schedule
	err := s.write(ctx, func(tx *sql.Tx) error {
		sc, err := getSchedule(ctx, tx, name)
		if err != nil {
			return err
		}
		was := sc.LastFired
		if err := fn(&sc); err != nil {
			return err
		}
		sc.Name = name // putSchedule writes neither it nor Created
		if sc.LastFired.Before(was) {
			return fmt.Errorf("schedule %s: last fired occurrence cannot move back from %s to %s: %w", name, was.Format(time.RFC3339), sc.LastFired.Format(time.RFC3339), store.ErrConflict)
		}
		if err := putSchedule(ctx, tx, sc); err != nil {
			return err
		}
		out, err = getSchedule(ctx, tx, name)
		return err
	})
	if err != nil {
		return store.Schedule{}, err
	}
	return out, nil
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM schedules WHERE name = ?`, name)
	if err != nil {
		return full(fmt.Errorf("delete schedule %s: %w", name, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("schedule %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// FireSchedule implements store.Schedules.
func (s *Store) FireSchedule(ctx context.Context, schedule string, occurrence, next time.Time, j store.Job, first store.Event, steps []store.PipelineStep) (store.Job, error) {
	err := s.write(ctx, func(tx *sql.Tx) error {
		sc, err := getSchedule(ctx, tx, schedule)
		if err != nil {
			return err
		}
		switch {
		case !sc.Enabled:
			return fmt.Errorf("schedule %s is disabled: %w", schedule, store.ErrConflict)
		case !sc.LastFired.IsZero() && !normTime(occurrence).After(sc.LastFired):
			return fmt.Errorf("schedule %s has fired %s already (last %s): %w", schedule,
				occurrence.UTC().Format(time.RFC3339), sc.LastFired.Format(time.RFC3339), store.ErrConflict)
		}
		if err := s.insertJob(ctx, tx, &j, first); err != nil {
			return fmt.Errorf("fire schedule %s: %w", schedule, err)
		}
		if err := insertSteps(ctx, tx, j.Name, steps); err != nil {
			return fmt.Errorf("fire schedule %s: %w", schedule, err)
		}
		sc.LastFired, sc.NextFire, sc.LastJob, sc.LastError, sc.Updated = occurrence, next, j.Name, "", first.Time
		return putSchedule(ctx, tx, sc)
	})
	if err != nil {
		return store.Job{}, err
	}
	return normJob(j), nil
}
