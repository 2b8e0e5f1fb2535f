package batch

import (
	"fmt"
	"os"

	"github.com/ferry-ml/ferry/internal/serving/batchdriver"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// batchDriverSnapshot stores Ferry's batch driver (embedded in the
// binary) as a snapshot, once per server, and returns its id: batch jobs
// take it as an input, so nodes fetch it through their blob cache.
func (s *Endpoints) batchDriverSnapshot() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.driverSnap != "" && s.ws.HasBlob(s.driverSnap) {
		return s.driverSnap, nil
	}
	tmp, err := os.MkdirTemp("", "ferry-batch-driver-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	dir, err := batchdriver.Install(tmp)
	if err != nil {
		return "", err
	}
	m, files, err := snapshot.Build(dir, snapshot.BuildOptions{})
	if err != nil {
		return "", fmt.Errorf("batch driver snapshot: %w", err)
	}
	id, err := s.ws.StoreSnapshot(m, files, "the batch driver snapshot")
	if err != nil {
		return "", err
	}
	s.driverSnap = id
	return id, nil
}
