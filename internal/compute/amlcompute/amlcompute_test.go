package amlcompute

import (
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// A cluster refuses, naming the field, what none of its nodes could run,
// and takes what fits.
func TestAdmit(t *testing.T) {
	c, err := spec.ParseCompute([]byte("name: cpu\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	sz, ok := sizes.Builtin().Lookup(c.Size)
	if !ok {
		t.Fatalf("size %s not in the built-in catalog", c.Size)
	}
	for job, want := range map[string]string{
		"command: x\nresources: {instance_count: 2, instance_type: standard_ds3_v2}\n": "",
		"command: x\nresources: {instance_count: 3}\n":                                 "resources.instance_count",
		"command: x\nresources: {instance_type: Standard_NC6s_v3}\n":                   "resources.instance_type",
		"command: x\nresources: {shm_size: 1g}\n":                                      "resources: docker_args and shm_size",
		"command: x\nservices: {lab: {type: jupyter_lab}}\n":                           "",
	} {
		j, err := spec.ParseJob([]byte(job))
		if err != nil {
			t.Fatalf("%q: %v", job, err)
		}
		err = Pool.Admit(c, sz, j, nil)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", job, err)
		case want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)):
			t.Errorf("%q: %v, want an error starting %q", job, err, want)
		}
	}
}
