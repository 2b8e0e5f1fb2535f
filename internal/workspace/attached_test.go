package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
)

// An attached machine takes one job at a time, as a cluster's node does:
// a second job waits Queued until the first ends. Its size has no cores or
// memory on record (nothing of it counts against a quota), and the
// conformance suite found that a job needing "all of nothing" fitted beside
// any number of others, so every job submitted ran at once.
func TestAttachedMachineRunsOneJobAtATime(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	s := newPoolService(t, openStore(t, dir), dir, &schedProvider{}, clk)
	key, err := secrets.NewKey(make([]byte, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Secrets = key
	c := &spec.Compute{Name: "box", Type: "virtualmachine", Address: "10.0.0.7", HostKey: "trust-on-first-use",
		SSHSettings: &spec.SSHSettings{AdminUsername: "ferry", AdminPassword: "not-used-by-the-paper-provider"}}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	submitTo(t, s, "first", "box")
	submitTo(t, s, "second", "box")
	settle(t, s)
	if got := status(t, s, "first").Status; got != apitypes.StatusPreparing {
		t.Fatalf("first job on the attached machine is %s, want Preparing", got)
	}
	if got := status(t, s, "second").Status; got != apitypes.StatusQueued {
		t.Fatalf("second job on a busy attached machine is %s, want Queued", got)
	}
	finishJob(t, s, "first")
	settle(t, s)
	if got := status(t, s, "second").Status; got != apitypes.StatusPreparing {
		t.Fatalf("second job once the machine is free is %s, want Preparing", got)
	}
}

// A kubernetes compute's registry password is sealed for storing, opened
// for its target alone, and redacted from views.
func TestRegistryPasswordSealed(t *testing.T) {
	key, err := secrets.NewKey(make([]byte, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	c := &spec.Compute{Name: "k8s", Type: "kubernetes", Registry: "127.0.0.1:5000",
		RegistryCredentials: &spec.RegistryCredentials{Username: "ferry", Password: "s3cret"}}
	if err := SealCompute(key, c); err != nil {
		t.Fatal(err)
	}
	if p := c.RegistryCredentials.Password; !secrets.IsSealed(p) || c.RegistryCredentials.Username != "ferry" {
		t.Fatalf("sealed credentials: %+v", c.RegistryCredentials)
	}
	open, err := OpenCompute(key, c)
	if err != nil {
		t.Fatal(err)
	}
	if open.RegistryCredentials.Password != "s3cret" || !secrets.IsSealed(c.RegistryCredentials.Password) {
		t.Errorf("opened %q; the stored copy %q", open.RegistryCredentials.Password, c.RegistryCredentials.Password)
	}
	redactCompute(c)
	if c.RegistryCredentials.Password != secrets.Redacted {
		t.Errorf("a view shows the password as %q", c.RegistryCredentials.Password)
	}
}
