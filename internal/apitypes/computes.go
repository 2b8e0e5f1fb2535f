package apitypes

import (
	"time"

	"github.com/ferry-ml/ferry/internal/nodeproto"
)

// Node is a node of a pool compute as the API shows it.
type Node struct {
	Name      string           `json:"name"`
	Compute   string           `json:"compute"`
	State     string           `json:"state"`
	Reason    string           `json:"reason,omitempty"`
	Size      string           `json:"size"`
	Address   string           `json:"address,omitempty"`
	Facts     *nodeproto.Facts `json:"facts,omitempty"`
	Jobs      []string         `json:"jobs"`
	Created   time.Time        `json:"created"`
	Joined    *time.Time       `json:"joined"`
	Heartbeat *time.Time       `json:"heartbeat"`
	IdleSince *time.Time       `json:"idle_since,omitempty"`
	// Warning says how the node has less than its size promises, and what
	// that means for the jobs placed on it.
	Warning string `json:"warning,omitempty"`
}

// ComputeEvent is a scaling or health event of a compute.
type ComputeEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

// Quota is a family's core quota as the API shows it. The low-priority
// quota is one more row, Family LowPriorityQuota: as in Azure, the cores
// of low-priority nodes of every family count against it and against no
// family's dedicated quota.
type Quota struct {
	Family      string `json:"family"`
	Limit       int    `json:"limit"`
	Used        int    `json:"used"`
	Set         bool   `json:"set"` // set by an owner rather than the default
	LowPriority bool   `json:"low_priority,omitempty"`
}
