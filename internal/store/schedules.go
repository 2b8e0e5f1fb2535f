package store

import (
	"context"
	"encoding/json"
	"time"
)

// Schedule is a job schedule. Spec (the schedule file and its trigger)
// and Job (the submission each firing makes) are JSON the workspace owns,
// opaque to the store. NextFire is the occurrence the schedule fires next
// (zero: none, it has ended); LastFired the last occurrence it fired
// (zero: none yet), which FireSchedule moves forward only, so an
// occurrence is never fired twice; LastJob the job that firing created.
// LastError says why the last occurrence created no job ("" when it did).
type Schedule struct {
	Name      string
	Spec      json.RawMessage
	Job       json.RawMessage
	Enabled   bool
	NextFire  time.Time
	LastFired time.Time
	LastJob   string
	LastError string
	CreatedBy string
	Created   time.Time
	Updated   time.Time
}

// Schedules keeps job schedules and fires them: FireSchedule stores the job
// an occurrence makes together with the schedule's move to its next
// occurrence, in one transaction, so that no occurrence fires twice. Its
// methods are safe for concurrent use, and keep the contract common to every
// part of Store: errors wrap ErrNotFound or ErrConflict where those apply,
// and a returned error leaves stored state unchanged.
type Schedules interface {
	// CreateSchedule stores a schedule; ErrConflict if the name is taken.
	CreateSchedule(ctx context.Context, sc Schedule) error
	// GetSchedule returns a schedule; ErrNotFound if there is none.
	GetSchedule(ctx context.Context, name string) (Schedule, error)
	// ListSchedules returns every schedule, ordered by name.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// UpdateSchedule reads, modifies with fn and writes back one schedule
	// in a single transaction; ErrNotFound if there is none, and then fn
	// is not called. A change fn makes to Name or Created is ignored, and
	// one that moves LastFired back is refused with ErrConflict. If fn
	// returns an error nothing is written and that error is returned as is.
	UpdateSchedule(ctx context.Context, name string, fn func(*Schedule) error) (Schedule, error)
	// DeleteSchedule removes a schedule; ErrNotFound if there is none.
	// The jobs it fired stay.
	DeleteSchedule(ctx context.Context, name string) error
	// FireSchedule stores the job that occurrence of schedule fires, with
	// its first event, and sets the schedule's LastFired to occurrence,
	// LastJob to the job, LastError to "" and NextFire to next, all in one
	// transaction: a firing is stored whole or not at all. ErrNotFound if
	// there is no such schedule; ErrConflict, with nothing written, if the
	// schedule is disabled, has fired occurrence or a later one, or the
	// job's name is taken. When j is a pipeline job's parent, steps are
	// its steps, stored as CreatePipelineJob stores them; nil otherwise.
	FireSchedule(ctx context.Context, schedule string, occurrence, next time.Time, j Job, first Event, steps []PipelineStep) (Job, error)
}
