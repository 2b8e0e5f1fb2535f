package spec

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A compute's instance types are its file's and the cluster's beside
// them; the file's wins where both name one.
func TestAllInstanceTypesFileWins(t *testing.T) {
	file := KubeInstanceType{Resources: KubeResources{Requests: map[string]string{"cpu": "20m"}}}
	cluster := KubeInstanceType{Resources: KubeResources{Requests: map[string]string{"cpu": "50m"}}}
	c := &Compute{
		InstanceTypes:        map[string]KubeInstanceType{"small": file},
		ClusterInstanceTypes: map[string]KubeInstanceType{"small": cluster, "big": cluster},
	}
	want := map[string]KubeInstanceType{"small": file, "big": cluster}
	if d := cmp.Diff(want, c.AllInstanceTypes()); d != "" {
		t.Errorf("AllInstanceTypes (-want +got):\n%s", d)
	}
	if got := (&Compute{}).AllInstanceTypes(); len(got) != 0 {
		t.Errorf("a compute with none: %v", got)
	}
}
