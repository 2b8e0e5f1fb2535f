package server

import (
	"testing"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Every registered pool type says how many nodes it aims at and is one
// kind of pool, no name is both a target type and a pool type, and
// serverless jobs have exactly one type to run on.
func TestPoolTypesAreWellFormed(t *testing.T) {
	serverless := 0
	for name, pt := range poolTypes {
		if _, ok := computeTypes[name]; ok {
			t.Errorf("%s is registered both as a target type and as a pool type", name)
		}
		kinds := 0
		for _, k := range []bool{pt.ScalesByQueue, pt.Instance, pt.Attached} {
			if k {
				kinds++
			}
		}
		if kinds != 1 {
			t.Errorf("%s: %d of ScalesByQueue, Instance and Attached set; want exactly one", name, kinds)
		}
		if pt.Bounds == nil || pt.Noun == "" {
			t.Errorf("%s: Bounds or Noun missing", name)
		}
		if pt.Serverless {
			serverless++
		}
		if PoolType(name) != pt {
			t.Errorf("PoolType(%q) is not the registered description", name)
		}
	}
	if serverless != 1 {
		t.Errorf("%d pool types run serverless jobs; want 1", serverless)
	}
	if PoolType("local") != nil {
		t.Error("PoolType(local) is a pool type; local is a target")
	}
}

// The node bounds each type declares are those the pool loop kept before
// they moved into the types' packages: a cluster its min and max, an
// instance one node while meant to run, an attached machine its one
// machine for good.
func TestPoolTypesBounds(t *testing.T) {
	for _, tc := range []struct {
		file       string
		meantToRun bool
		want       compute.NodeBounds
	}{
		{"name: cpu\ntype: amlcompute\nmin_instances: 1\nmax_instances: 4\nidle_time_before_scale_down: 300\n", true,
			compute.NodeBounds{Min: 1, Max: 4, IdleBeforeRemoval: 300e9}},
		{"name: box\ntype: computeinstance\n", true, compute.NodeBounds{Min: 1, Max: 1, IdleBeforeRemoval: compute.Forever}},
		{"name: box\ntype: computeinstance\n", false, compute.NodeBounds{Min: 0, Max: 0, IdleBeforeRemoval: compute.Forever}},
		{"name: vm\ntype: virtualmachine\naddress: 10.0.0.1\nssh_settings: {admin_username: azureuser, admin_password: x}\n", false, compute.NodeBounds{Min: 1, Max: 1, IdleBeforeRemoval: compute.Forever}},
	} {
		c, err := spec.ParseCompute([]byte(tc.file))
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		c.ApplyDefaults()
		if got := poolTypes[c.Type].Bounds(c, tc.meantToRun); got != tc.want {
			t.Errorf("%s (meant to run %v): bounds %+v, want %+v", c.Type, tc.meantToRun, got, tc.want)
		}
	}
}
