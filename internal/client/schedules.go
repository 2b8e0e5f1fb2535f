package client

import (
	"context"
	"net/url"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// CreateSchedule creates a job schedule, or updates the one of its name.
func (c *Client) CreateSchedule(ctx context.Context, req api.ScheduleRequest) (*workspace.Schedule, error) {
	var out workspace.Schedule
	return &out, c.do(ctx, "POST", "/v1/schedules", req, &out)
}

// ListSchedules lists the job schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]*workspace.Schedule, error) {
	var out []*workspace.Schedule
	return out, c.do(ctx, "GET", "/v1/schedules", nil, &out)
}

// GetSchedule shows one job schedule.
func (c *Client) GetSchedule(ctx context.Context, name string) (*workspace.Schedule, error) {
	var out workspace.Schedule
	return &out, c.do(ctx, "GET", "/v1/schedules/"+url.PathEscape(name), nil, &out)
}

// SetScheduleEnabled enables or disables a job schedule.
func (c *Client) SetScheduleEnabled(ctx context.Context, name string, enabled bool) (*workspace.Schedule, error) {
	op := "disable"
	if enabled {
		op = "enable"
	}
	var out workspace.Schedule
	return &out, c.do(ctx, "POST", "/v1/schedules/"+url.PathEscape(name)+"/"+op, nil, &out)
}

// DeleteSchedule deletes a job schedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/schedules/"+url.PathEscape(name), nil, nil)
}

// CheckReferences asks the workspace whether it has what refs name; the
// answer lists the problems, none when every reference resolves.
func (c *Client) CheckReferences(ctx context.Context, refs []workspace.Reference) ([]workspace.ReferenceProblem, error) {
	var out api.ReferencesAnswer
	return out.Problems, c.do(ctx, "POST", "/v1/references/check", api.ReferencesRequest{References: refs}, &out)
}
