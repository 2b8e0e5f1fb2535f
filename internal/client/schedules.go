package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/url"
)

// CreateSchedule creates a job schedule, or updates the one of its name.
func (c *Client) CreateSchedule(ctx context.Context, req apitypes.ScheduleRequest) (*apitypes.Schedule, error) {
	var out apitypes.Schedule
	return &out, c.do(ctx, "POST", "/v1/schedules", req, &out)
}

// ListSchedules lists the job schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]*apitypes.Schedule, error) {
	var out []*apitypes.Schedule
	return out, c.do(ctx, "GET", "/v1/schedules", nil, &out)
}

// GetSchedule shows one job schedule.
func (c *Client) GetSchedule(ctx context.Context, name string) (*apitypes.Schedule, error) {
	var out apitypes.Schedule
	return &out, c.do(ctx, "GET", "/v1/schedules/"+url.PathEscape(name), nil, &out)
}

// SetScheduleEnabled enables or disables a job schedule.
func (c *Client) SetScheduleEnabled(ctx context.Context, name string, enabled bool) (*apitypes.Schedule, error) {
	op := "disable"
	if enabled {
		op = "enable"
	}
	var out apitypes.Schedule
	return &out, c.do(ctx, "POST", "/v1/schedules/"+url.PathEscape(name)+"/"+op, nil, &out)
}

// DeleteSchedule deletes a job schedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/schedules/"+url.PathEscape(name), nil, nil)
}

// CheckReferences asks the workspace whether it has what refs name; the
// answer lists the problems, none when every reference resolves.
func (c *Client) CheckReferences(ctx context.Context, refs []apitypes.Reference) ([]apitypes.ReferenceProblem, error) {
	var out apitypes.ReferencesAnswer
	return out.Problems, c.do(ctx, "POST", "/v1/references/check", apitypes.ReferencesRequest{References: refs}, &out)
}
