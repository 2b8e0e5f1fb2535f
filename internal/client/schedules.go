package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
)

// Schedules are the job schedules.
var Schedules = Named[apitypes.Schedule, apitypes.ScheduleRequest]{Path: "/v1/schedules"}

// CreateSchedule creates a job schedule, or updates the one of its name.
func (c *Client) CreateSchedule(ctx context.Context, req apitypes.ScheduleRequest) (*apitypes.Schedule, error) {
	return Schedules.Create(ctx, c, req)
}

// ListSchedules lists the job schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]*apitypes.Schedule, error) {
	return Schedules.List(ctx, c)
}

// GetSchedule shows one job schedule.
func (c *Client) GetSchedule(ctx context.Context, name string) (*apitypes.Schedule, error) {
	return Schedules.Get(ctx, c, name)
}

// SetScheduleEnabled enables or disables a job schedule.
func (c *Client) SetScheduleEnabled(ctx context.Context, name string, enabled bool) (*apitypes.Schedule, error) {
	op := "/disable"
	if enabled {
		op = "/enable"
	}
	var out apitypes.Schedule
	return &out, c.do(ctx, "POST", Schedules.ItemPath(name)+op, nil, &out)
}

// DeleteSchedule deletes a job schedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return Schedules.Delete(ctx, c, name)
}

// CheckReferences asks the workspace whether it has what refs name; the
// answer lists the problems, none when every reference resolves.
func (c *Client) CheckReferences(ctx context.Context, refs []apitypes.Reference) ([]apitypes.ReferenceProblem, error) {
	var out apitypes.ReferencesAnswer
	return out.Problems, c.do(ctx, "POST", "/v1/references/check", apitypes.ReferencesRequest{References: refs}, &out)
}
