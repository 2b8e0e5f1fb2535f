package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/schedule"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// scheduleTick is how often the schedule loop looks for occurrences that
// have come without being woken: firings are at most this late.
const scheduleTick = time.Second

// Tags a fired job carries: its schedule, the occurrence it was fired
// for, and, on a catch-up firing, how many earlier occurrences the server
// missed (it was down) and skipped.
const (
	TagSchedule   = "ferry.schedule"
	TagOccurrence = "ferry.schedule.occurrence"
	TagMissed     = "ferry.schedule.missed"
)

// firedJobName is the name of the job an occurrence fires: the schedule's
// name and the occurrence in UTC, so that the name says what fired it.
func firedJobName(schedule string, occurrence time.Time) string {
	return schedule + "-" + occurrence.UTC().Format("20060102T150405Z")
}

// kickScheduleLoop asks for a pass of the schedule loop.
func (sl *Controller) kickScheduleLoop() {
	select {
	case sl.wake <- struct{}{}:
	default:
	}
}

// reconcileSchedules is one pass of the schedule loop: every enabled
// schedule whose next occurrence has come fires it.
func (sl *Controller) reconcileSchedules(ctx context.Context) error {
	recs, err := sl.st.ListSchedules(ctx)
	if err != nil {
		return err
	}
	now := sl.core.Now()
	for _, rec := range recs {
		if !rec.Enabled || rec.NextFire.IsZero() || rec.NextFire.After(now) {
			continue
		}
		if err := sl.core.Guard("schedule "+rec.Name, func() error { return sl.fireSchedule(ctx, rec, now) }); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sl.log.Error("schedule", "schedule", rec.Name, "err", err)
		}
	}
	return nil
}

// fireSchedule fires the occurrence of rec that has come by now (the
// latest, when the server missed several).
func (sl *Controller) fireSchedule(ctx context.Context, rec store.Schedule, now time.Time) error {
	t, err := storedTrigger(rec)
	if err != nil {
		return sl.scheduleFailed(ctx, rec.Name, time.Time{}, now, time.Time{}, fmt.Sprintf("its trigger can no longer be read: %v", err))
	}
	fr, ok := sl.scheduleClock().Due(t, rec.NextFire, now)
	if !ok {
		return nil
	}
	var stored storedSubmission
	if err := json.Unmarshal(rec.Job, &stored); err != nil {
		return sl.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored job can no longer be read: %v", err))
	}
	if len(stored.Pipeline) > 0 {
		return sl.firePipeline(ctx, rec, fr, now, stored)
	}
	j, err := spec.DecodeJobJSON(stored.Spec)
	if err != nil {
		return sl.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored job is no longer valid: %v", err))
	}
	j.Name = firedJobName(rec.Name, fr.Occurrence)
	if j.ExperimentName == "" {
		j.ExperimentName = rec.Name // Azure's default for a schedule's jobs
	}
	expand := firedExpander(j.Name, fr)
	for name, in := range j.Inputs {
		if in.IsLiteral() && strings.Contains(*in.Value, "${{") {
			v := expand.Replace(*in.Value)
			in.Value = &v
			j.Inputs[name] = in
		}
	}
	j.Tags = firedTags(j.Tags, rec.Name, fr)
	sub := workspace.Submission{
		Spec: j, CodeSnapshot: stored.CodeSnapshot, InputSnapshots: stored.InputSnapshots, EnvironmentSnapshot: stored.EnvironmentSnapshot,
		Create: func(ctx context.Context, job store.Job, first store.Event) (store.Job, error) {
			return sl.st.FireSchedule(ctx, rec.Name, fr.Occurrence, fr.Next, job, first, nil)
		},
	}
	owner := auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}
	job, err := sl.core.SubmitJob(ctx, owner, sub)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return sl.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, err.Error())
	}
	sl.log.Info("schedule fired", "schedule", rec.Name, "occurrence", fr.Occurrence, "job", job.Name, "skipped", fr.Skipped, "next", fr.Next)
	return nil
}

// firedExpander replaces the expressions Azure gives a schedule's job's
// literal inputs: the fired job's name and the occurrence it fires.
func firedExpander(job string, fr schedule.Firing) *strings.Replacer {
	return strings.NewReplacer("${{name}}", job, "${{creation_context.trigger_time}}", fr.Occurrence.UTC().Format(time.RFC3339))
}

// firedTags are a fired job's tags: its own, and the schedule's.
func firedTags(own map[string]string, name string, fr schedule.Firing) map[string]string {
	tags := maps.Clone(own)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagSchedule] = name
	tags[TagOccurrence] = fr.Occurrence.UTC().Format(time.RFC3339)
	if fr.Skipped > 0 {
		tags[TagMissed] = strconv.Itoa(fr.Skipped)
	}
	return tags
}

// firePipeline is fireSchedule for a schedule of a pipeline job: the
// parent job and its steps are stored with the occurrence in one
// transaction, and the pipeline loop makes the steps' jobs, as for a
// pipeline job submitted through the API.
func (sl *Controller) firePipeline(ctx context.Context, rec store.Schedule, fr schedule.Firing, now time.Time, stored storedSubmission) error {
	p, err := spec.DecodePipelineJobJSON(stored.Pipeline)
	if err != nil {
		return sl.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored pipeline job is no longer valid: %v", err))
	}
	p.Name = firedJobName(rec.Name, fr.Occurrence)
	if p.ExperimentName == "" {
		p.ExperimentName = rec.Name
	}
	expand := firedExpander(p.Name, fr)
	for name, in := range p.Inputs {
		if in.IsLiteral() && strings.Contains(*in.Value, "${{") {
			v := expand.Replace(*in.Value)
			in.Value = &v
			p.Inputs[name] = in
		}
	}
	p.Tags = firedTags(p.Tags, rec.Name, fr)
	sub := pipelines.Submission{Spec: p, InputSnapshots: stored.InputSnapshots,
		Create: func(ctx context.Context, job store.Job, first store.Event, steps []store.PipelineStep) (store.Job, error) {
			return sl.st.FireSchedule(ctx, rec.Name, fr.Occurrence, fr.Next, job, first, steps)
		}}
	owner := auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}
	job, err := sl.pipes.SubmitPipeline(ctx, owner, sub)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return sl.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, err.Error())
	}
	sl.log.Info("schedule fired", "schedule", rec.Name, "occurrence", fr.Occurrence, "job", job.Name, "skipped", fr.Skipped, "next", fr.Next)
	return nil
}

// scheduleFailed records that occurrence of a schedule made no job, and
// why, and moves it on to next, unless the schedule was disabled or fired
// the occurrence meanwhile (a conflict that is no failure). A zero
// occurrence is a schedule that cannot fire any more: it ends.
func (sl *Controller) scheduleFailed(ctx context.Context, name string, occurrence, now, next time.Time, why string) error {
	_, err := sl.st.UpdateSchedule(ctx, name, func(sc *store.Schedule) error {
		if !sc.Enabled || (!occurrence.IsZero() && !sc.LastFired.IsZero() && !sc.LastFired.Before(occurrence)) {
			return errNoChange
		}
		if !occurrence.IsZero() {
			sc.LastFired, sc.LastJob = occurrence, ""
			why = "occurrence " + occurrence.UTC().Format(time.RFC3339) + " created no job: " + why
		}
		sc.NextFire, sc.LastError, sc.Updated = next, strings.TrimSpace(why), now
		return nil
	})
	if errors.Is(err, errNoChange) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err == nil {
		sl.log.Warn("schedule fired no job", "schedule", name, "reason", why)
	}
	return err
}

var errNoChange = errors.New("no change")
