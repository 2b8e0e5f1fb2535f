package workspace

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
)

// A job that asks for GPUs is refused at submit, naming the field, the
// compute and its size, by a compute none of whose nodes can ever have
// them; a cluster of a GPU size takes it even with no node now, and an
// attached machine takes it until its agent has said what it has.
func TestJobAskingForGPUsIsRefusedWhereNoNodeCanHaveThem(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	s := newPoolService(t, openStore(t, dir), dir, &schedProvider{}, clk)
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, "workspace.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Secrets = key // the attached machine's key is sealed with it
	ctx := context.Background()
	for _, y := range []string{
		"name: cpu\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\n",
		"name: gpu\ntype: amlcompute\nsize: Standard_NC6\nmax_instances: 2\n",
		"name: dev-box\ntype: computeinstance\nsize: Standard_DS1_v2\n",
		"name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, ssh_private_key: k}\n",
	} {
		c, err := spec.ParseCompute([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateCompute(ctx, c); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	submit := func(compute string, props map[string]any) error {
		_, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Command: "nvidia-smi", Compute: compute, Resources: &spec.Resources{Properties: props}}})
		return err
	}
	refused := func(compute string, props map[string]any, wants ...string) {
		t.Helper()
		err := submit(compute, props)
		if err == nil {
			t.Errorf("%s took a job asking for %v", compute, props)
			return
		}
		if e, ok := err.(*apperr.Error); !ok || e.Code != apperr.CodeInvalid {
			t.Errorf("%s: %v is not a 400", compute, err)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", compute, err, w)
			}
		}
	}
	one := map[string]any{"gpus": 1}
	refused("cpu", one, "resources.properties.gpus", "cluster cpu", "Standard_DS3_v2", "no GPU", "ferry size list")
	refused("gpu", map[string]any{"gpu_count": 2}, "resources.properties.gpu_count", "Standard_NC6", "has 1 GPU")
	refused("dev-box", one, "resources.properties.gpus", "compute instance dev-box", "Standard_DS1_v2")
	if err := submit("gpu", one); err != nil {
		t.Errorf("a cluster of a GPU size with no node now refused a GPU job: %v", err)
	}
	if err := submit("box", one); err != nil {
		t.Errorf("an attached machine whose agent has not joined refused a GPU job: %v", err)
	}
	// Its agent joins and finds no GPU: from now on it is refused.
	pass(t, s)
	for _, n := range mustNodes(t, s, "box") {
		if _, err := s.Nodes().JoinNode(ctx, auth.Principal{Kind: KindJoin, Subject: n.Name}, nodeproto.JoinRequest{Name: n.Name, Facts: nodeproto.Facts{CPUs: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	refused("box", one, "resources.properties.gpus", "attached machine box", "no GPU")
	if err := submit("cpu", nil); err != nil {
		t.Errorf("a job asking for no GPU was refused: %v", err)
	}
}
