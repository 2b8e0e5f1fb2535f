package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// completions runs the hidden `ferry __complete ARGS...` that the shell
// scripts of `ferry completion SHELL` call on TAB, and returns its
// suggestions without their descriptions.
func completions(t *testing.T, s *testServer, args ...string) []string {
	t.Helper()
	r := s.ferry(t, append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		t.Fatalf("__complete %v: %s", args, r)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.HasPrefix(l, ":") { // the directive, last
			if l != ":4" {
				t.Errorf("__complete %v: directive %s, want :4 (no file names)", args, l)
			}
			continue
		}
		name, _, _ := strings.Cut(l, "\t")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TAB completes the names of jobs, computes, nodes, environments, sizes
// and size families from a real workspace.
func TestCompletionOfWorkspaceNames(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cluster.yml": "name: ds1\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\n",
		"env.yml":     "name: torch-env\nversion: 3\nimage: ferry-base:bookworm\n",
		"job.yml":     "command: echo hi\ncompute: ds1\nname: hello-1\n",
	})
	for _, args := range [][]string{
		{"quota", "set", "standardDSv2Family", "0"}, // the job waits: no node, nothing to clean up
		{"compute", "create", "-f", filepath.Join(dir, "cluster.yml")},
		{"environment", "create", "-f", filepath.Join(dir, "env.yml")},
		{"job", "create", "-f", filepath.Join(dir, "job.yml")},
	} {
		if r := s.ferry(t, args...); r.code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"job", "show", ""}, []string{"hello-1"}},
		{[]string{"job", "cancel", "hel"}, []string{"hello-1"}},
		{[]string{"job", "show", "x"}, nil},
		{[]string{"job", "show", "hello-1", ""}, nil}, // one NAME only
		{[]string{"compute", "show", ""}, []string{"ds1", "local"}},
		{[]string{"compute", "resize", "d"}, []string{"ds1"}},
		{[]string{"job", "list", "--compute", ""}, []string{"ds1", "local"}},
		{[]string{"environment", "show", "t"}, []string{"torch-env", "torch-env:3"}},
		{[]string{"job", "create", "-f", "job.yml", "--set", "compute="}, []string{"compute=ds1", "compute=local"}},
		{[]string{"quota", "enable-size", "Standard_DS1_"}, []string{"Standard_DS1_v2"}},
		{[]string{"quota", "set", "standardDSv2"}, []string{"standardDSv2Family"}},
	} {
		got := completions(t, s, c.args...)
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("__complete %q (-want +got):\n%s", c.args, diff)
		}
	}
	// The shell scripts exist and call __complete.
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := s.ferry(t, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "__complete") {
			t.Errorf("completion %s: %s", sh, r)
		}
	}
}

// Without a running local server completion suggests nothing and starts
// none.
func TestCompletionStartsNoServer(t *testing.T) {
	home := t.TempDir()
	r := runCLI(t, map[string]string{"FERRY_HOME": home}, "__complete", "job", "show", "")
	if r.code != 0 || strings.TrimSpace(r.stdout) != ":4" {
		t.Errorf("__complete with no server: %s", r)
	}
	if _, ok := liveServer(t.Context(), home); ok {
		t.Error("completion started a server")
	}
}
