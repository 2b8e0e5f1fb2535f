package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TAB completes endpoint names, as the argument and as --name; a name
// given twice, or two different names, is refused before any request.
func TestOnlineEndpointNames(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ep.yml": "name: iris-ep\n"})
	if r := s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "ep.yml")); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"online-endpoint", "show", ""}, []string{"iris-ep"}},
		{[]string{"online-endpoint", "get-credentials", "ir"}, []string{"iris-ep"}},
		{[]string{"online-endpoint", "invoke", "--name", ""}, []string{"iris-ep"}},
		{[]string{"online-endpoint", "show", "iris-ep", ""}, nil},
		{[]string{"online-endpoint", "regenerate-keys", "iris-ep", "--key-type", ""}, []string{"primary", "secondary"}},
	} {
		if diff := cmp.Diff(c.want, completions(t, s, c.args...)); diff != "" {
			t.Errorf("__complete %q (-want +got):\n%s", c.args, diff)
		}
	}
	r := s.ferry(t, "online-endpoint", "show", "iris-ep", "-n", "other")
	if r.code == 0 {
		t.Fatalf("two names: %s", r)
	}
	mustContain(t, "two names", r.stderr, "iris-ep or other")
	r = s.ferry(t, "online-endpoint", "show")
	if r.code == 0 {
		t.Fatalf("no name: %s", r)
	}
	mustContain(t, "no name", r.stderr, "which endpoint", "--name")
	r = s.ferry(t, "online-endpoint", "update", "iris-ep", "--traffic", "blue")
	if r.code == 0 {
		t.Fatalf("bad traffic: %s", r)
	}
	mustContain(t, "bad traffic", r.stderr, "--traffic", "DEPLOYMENT=PERCENT")
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q does not say %q", what, got, w)
		}
	}
}
