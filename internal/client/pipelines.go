package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
)

// SubmitPipeline submits a pipeline job.
func (c *Client) SubmitPipeline(ctx context.Context, req apitypes.PipelineJobRequest) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "POST", "/v1/pipeline-jobs", req, &out)
}
