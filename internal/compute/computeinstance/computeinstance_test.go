package computeinstance

import (
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// An instance is one machine of its size: a job that asks for more nodes
// or another size is refused with the field named.
func TestAdmit(t *testing.T) {
	c, err := spec.ParseCompute([]byte("name: box\ntype: computeinstance\nsize: Standard_DS3_v2\n"))
	if err != nil {
		t.Fatal(err)
	}
	sz, ok := sizes.Builtin().Lookup(c.Size)
	if !ok {
		t.Fatalf("size %s not in the built-in catalog", c.Size)
	}
	for job, want := range map[string]string{
		"command: x\nresources: {instance_count: 1, instance_type: Standard_DS3_v2}\n": "",
		"command: x\nresources: {instance_count: 2}\n":                                 "resources.instance_count",
		"command: x\nresources: {instance_type: Standard_DS1_v2}\n":                    "resources.instance_type",
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
