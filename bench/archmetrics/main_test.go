package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClassify(t *testing.T) {
	for pkg, want := range map[string]int{
		"internal/workspace":          2,
		"internal/workspace/sweeps":   2, // a part split off below it
		"internal/store/sqlite":       2,
		"internal/runner/invocation":  0, // the exact row over internal/runner's
		"internal/environment/docker": 1,
		"internal/apitypes":           0,
		"cmd/ferry":                   6,
	} {
		got, ok := classify(pkg)
		if !ok || got.rank != want {
			t.Errorf("classify(%q) = %+v, %v; want layer %d", pkg, got, ok, want)
		}
	}
	for _, pkg := range []string{"internal/sweeps", "internal/runnerx", "bench/batch"} {
		if got, ok := classify(pkg); ok {
			t.Errorf("classify(%q) = %+v; want unclassified", pkg, got)
		}
	}
}

func TestBackUp(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"internal/runner", "internal/workspace", "layer,edge→domain"},
		{"internal/studio", "internal/workspace", "edge→domain"},
		{"internal/executor", "internal/compute/local", "layer"},
		{"internal/cli", "internal/server", ""},
		{"internal/api", "internal/workspace", ""},
		{"internal/runner", "internal/client", ""},
		{"internal/workspace", "internal/scheduler", ""},
	} {
		from, _ := classify(c.from)
		to, _ := classify(c.to)
		if got := backUp(from, to); got != c.want {
			t.Errorf("backUp(%s → %s) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

func TestLayerRowsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range layers {
		if seen[l.pattern] {
			t.Errorf("%s has two rows", l.pattern)
		}
		seen[l.pattern] = true
	}
}

func TestMeasureDir(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.go": `package p

type T struct{}
type G[K comparable, V any] struct{}
type L[E any] []E

func (T) A()       {}
func (*T) B()      {}
func (g *G[K, V]) C() {}
func (L[E]) D()    {}
func F()           {}
`,
		"b.go":      "package p\n\nfunc (t *T) E() {}\n",
		"a_test.go": "package p\n\nfunc (T) Z() {}\nfunc (T) Y() {}\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines, methods, err := measureDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if lines != 14 {
		t.Errorf("lines = %d, want 14 (a.go and b.go, not the test)", lines)
	}
	if diff := cmp.Diff(map[string]int{"T": 3, "G": 1, "L": 1}, methods); diff != "" {
		t.Errorf("methods (-want +got):\n%s", diff)
	}
	if typ, n := most(methods); typ != "T" || n != 3 {
		t.Errorf("most = %s %d, want T 3", typ, n)
	}
}
