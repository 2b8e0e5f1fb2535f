package virtualmachine

import (
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// An attached machine is one machine with no size: a job that asks for
// more nodes or for a size is refused with the field named.
func TestAdmit(t *testing.T) {
	c, err := spec.ParseCompute([]byte("name: vm\ntype: virtualmachine\naddress: 10.0.0.1\nssh_settings: {admin_username: azureuser, admin_password: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for job, want := range map[string]string{
		"command: x\nresources: {instance_count: 1}\n":              "",
		"command: x\nresources: {instance_count: 2}\n":              "resources.instance_count",
		"command: x\nresources: {instance_type: Standard_DS1_v2}\n": "resources.instance_type",
	} {
		j, err := spec.ParseJob([]byte(job))
		if err != nil {
			t.Fatalf("%q: %v", job, err)
		}
		err = Pool.Admit(c, sizes.Size{}, j, nil)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", job, err)
		case want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)):
			t.Errorf("%q: %v, want an error starting %q", job, err, want)
		}
	}
}
