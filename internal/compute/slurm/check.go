package slurm

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/spec"
)

// CheckError says which field of the compute to fix, and why. It never
// holds a secret.
type CheckError struct {
	Field string // e.g. partition, host_key, ssh_settings.admin_password
	Msg   string
	Err   error // the underlying classified error (for errors.Is), if any
}

func (e *CheckError) Error() string { return e.Field + ": " + e.Msg }
func (e *CheckError) Unwrap() error { return e.Err }

// CheckCompute implements compute.Checker: Check, then the login node's
// host key pinned into c when c trusted it on first use.
func (t *Target) CheckCompute(ctx context.Context, c *spec.Compute) error {
	key, err := t.Check(ctx)
	if err != nil {
		return err
	}
	if key != "" {
		c.HostKey = key
	}
	return nil
}

// Check is what `compute create/attach` runs before storing a slurm
// compute: the login node lets Ferry in (over SSH), sinfo answers, the
// partition exists, work_dir can be written, and the runner binary is in
// place. It returns the login node's host key as a known_hosts line, to
// be pinned when the compute said trust-on-first-use ("" on this host).
// Its errors are *CheckError values naming the field to fix.
func (t *Target) Check(ctx context.Context) (hostKey string, err error) {
	where := "on the server's host"
	if s, ok := t.host.(*sshHost); ok {
		if hostKey, err = s.checkLogin(ctx); err != nil {
			return "", err
		}
		where = "on the login node " + t.c.Address
	}
	// %R: partition names without the default's '*'.
	out, err := t.host.run(ctx, "sinfo -h -o %R", nil)
	if err != nil {
		if _, ok := err.(*CheckError); ok {
			return "", err
		}
		hint := "run the server on a login node of the cluster, or give address: a login node to submit from over SSH"
		if t.c.Address != "" {
			hint = "check that Slurm's client commands are on the login user's PATH and that the cluster answers"
		}
		return "", &CheckError{Field: "address", Err: err, Msg: fmt.Sprintf("sinfo does not answer %s (%v); %s", where, err, hint)}
	}
	parts := strings.Fields(string(out))
	if !slices.Contains(parts, t.c.Partition) {
		slices.Sort(parts)
		return "", &CheckError{Field: "partition", Msg: fmt.Sprintf("the cluster has no partition %q; sinfo lists %s", t.c.Partition, strings.Join(slices.Compact(parts), ", "))}
	}
	if _, err := t.host.run(ctx, "mkdir -p "+shellQuote(path.Join(t.c.WorkDir, "runs"))+" && test -w "+shellQuote(t.c.WorkDir), nil); err != nil {
		return "", &CheckError{Field: "work_dir", Err: err, Msg: fmt.Sprintf("cannot make or write %s %s (%v); give a directory the login user may write, on a file system every compute node shares", t.c.WorkDir, where, err)}
	}
	if len(t.cfg.Runner) == 0 {
		if _, err := t.host.binary(ctx, t.cfg.Exe, path.Join(t.c.WorkDir, "bin")); err != nil {
			return "", &CheckError{Field: "work_dir", Err: err, Msg: fmt.Sprintf("cannot place the ferry binary under %s/bin: %v", t.c.WorkDir, err)}
		}
	}
	return hostKey, nil
}
