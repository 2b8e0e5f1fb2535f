package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferry-ml/ferry/internal/provider"
)

var _ provider.Preempter = (*Provider)(nil)

// PreemptedFile is the marker in a machine's directory that makes the
// provider report the machine preempted. Preempt writes it; an operator
// may too (`touch DIR/<compute>/<node>/preempted`), to see what the jobs of
// a low-priority cluster do when a cloud takes a machine back.
const PreemptedFile = "preempted"

// Preempt implements provider.Preempter: it writes the machine's marker.
// The agent keeps running until Terminate, as a cloud machine does during
// its eviction notice.
func (p *Provider) Preempt(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pool, name, err := parseID(id)
	if err != nil {
		return err
	}
	dir := p.machineDir(pool, name)
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := readRecord(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("process provider: preempt %s: %w", id, provider.ErrNotFound)
	}
	if err := os.WriteFile(filepath.Join(dir, PreemptedFile), nil, 0o600); err != nil {
		return fmt.Errorf("process provider: preempt %s: %w", id, err)
	}
	return nil
}

// preempted reports whether the machine in dir carries the marker.
func preempted(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, PreemptedFile))
	return err == nil
}
