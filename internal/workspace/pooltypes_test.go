package workspace

import (
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/compute/amlcompute"
	"github.com/ferry-ml/ferry/internal/compute/computeinstance"
	"github.com/ferry-ml/ferry/internal/compute/virtualmachine"
)

// testPoolTypes are the pool types the server registers (server's
// poolTypes), for workspaces made by tests.
var testPoolTypes = map[string]*compute.Pool{
	amlcompute.Type:      amlcompute.Pool,
	computeinstance.Type: computeinstance.Pool,
	virtualmachine.Type:  virtualmachine.Pool,
}
