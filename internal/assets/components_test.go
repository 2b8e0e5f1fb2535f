package assets

import (
	"testing"

	"github.com/ferry-ml/ferry/internal/spec"
)

func TestComponentDigestIsContentOnly(t *testing.T) {
	c := &spec.Component{Name: "a", Version: "1", Description: "x", Type: "command", Command: "echo ${{inputs.n}}",
		Inputs: map[string]spec.ComponentInput{"n": {Type: "integer"}}}
	d := ComponentDigest(c)
	other := *c
	other.Name, other.Version, other.Description, other.Tags = "b", "2", "y", map[string]string{"k": "v"}
	if ComponentDigest(&other) != d {
		t.Error("name, version, description or tags changed the digest")
	}
	other.Command = "echo ${{inputs.n}} again"
	if ComponentDigest(&other) == d {
		t.Error("a changed command kept the digest")
	}
	other = *c
	other.CodeSnapshot = "ab"
	if ComponentDigest(&other) == d {
		t.Error("changed code kept the digest")
	}
}
