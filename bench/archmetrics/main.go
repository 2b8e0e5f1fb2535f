// Command archmetrics measures the shape of the tree it is run in, for
// before-and-after notes on restructurings: lines and the largest method
// set per package under internal/, import arrows that run back up the
// layers of layers.go, what the runner links of Ferry's, and the
// duplicates command's pair count.
//
//	go run ./bench/archmetrics
//
// It prints figures; it asserts nothing.
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	start := time.Now()
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "archmetrics:", err)
		os.Exit(1)
	}
	fmt.Printf("\ntook %s\n", time.Since(start).Round(time.Millisecond))
}

// pkg is what archmetrics reads of `go list -json`.
type pkg struct {
	ImportPath                         string
	Dir                                string
	Imports, TestImports, XTestImports []string
}

func run(w io.Writer) error {
	out, err := goCmd("list", "-m", "-f", "{{.Path}} {{.Dir}}")
	if err != nil {
		return err
	}
	mod, root, _ := strings.Cut(strings.TrimSpace(out), " ")
	pkgs, err := listPackages(root)
	if err != nil {
		return err
	}
	rel := func(path string) (string, bool) { return strings.CutPrefix(path, mod+"/") }
	if err := printSizes(w, pkgs, rel); err != nil {
		return err
	}
	printArrows(w, pkgs, rel)
	if err := printRunnerDeps(w, root, rel); err != nil {
		return err
	}
	printDuplicates(w, root)
	return nil
}

// goCmd runs the go command and returns its standard output.
func goCmd(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func listPackages(root string) ([]pkg, error) {
	out, err := goCmd("list", "-e", "-json", root+"/...")
	if err != nil {
		return nil, err
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list -json: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// measureDir counts the lines of the non-test Go files in dir and the
// methods of each receiver base type declared in them.
func measureDir(dir string) (lines int, methods map[string]int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	methods = map[string]int{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, nil, err
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return 0, nil, fmt.Errorf("parse %s: %w", name, err)
		}
		countMethods(f, methods)
	}
	return lines, methods, nil
}

// countMethods adds f's methods to counts by receiver base type: *T, T,
// T[K] and *T[K] all count for T.
func countMethods(f *ast.File, counts map[string]int) {
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
			continue
		}
		t := fn.Recv.List[0].Type
		if star, ok := t.(*ast.StarExpr); ok {
			t = star.X
		}
		switch x := t.(type) {
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		}
		if id, ok := t.(*ast.Ident); ok {
			counts[id.Name]++
		}
	}
}

// most returns the type with the most methods, the name first on a tie.
func most(methods map[string]int) (string, int) {
	var name string
	n := 0
	for t, c := range methods {
		if c > n || c == n && t < name {
			name, n = t, c
		}
	}
	return name, n
}

type sized struct {
	path    string
	lines   int
	typ     string
	methods int
}

func printSizes(w io.Writer, pkgs []pkg, rel func(string) (string, bool)) error {
	var rows []sized
	var top sized
	total := 0
	for _, p := range pkgs {
		path, ok := rel(p.ImportPath)
		if !ok || !strings.HasPrefix(path, "internal/") {
			continue
		}
		lines, methods, err := measureDir(p.Dir)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		typ, n := most(methods)
		if n == 0 {
			typ = "-"
		}
		rows = append(rows, sized{path, lines, typ, n})
		total += lines
		if n > top.methods {
			top = rows[len(rows)-1]
		}
	}
	slices.SortFunc(rows, func(a, b sized) int { return cmp.Or(b.lines-a.lines, strings.Compare(a.path, b.path)) })
	fmt.Fprintf(w, "== non-test Go lines per package under internal/ (%d packages, %d lines)\n", len(rows), total)
	fmt.Fprintf(w, "%-36s %7s  %s\n", "package", "lines", "type with the most methods")
	for i, r := range rows {
		if i < 10 || r.path == "internal/workspace" {
			fmt.Fprintf(w, "%-36s %7d  %s (%d)\n", r.path, r.lines, r.typ, r.methods)
		}
	}
	fmt.Fprintf(w, "largest method set: %s.%s, %d methods\n", top.path, top.typ, top.methods)
	return nil
}

// arrow is one import that runs back up.
type arrow struct {
	from, to string
	fl, tl   layer
	why      string
}

func printArrows(w io.Writer, pkgs []pkg, rel func(string) (string, bool)) {
	var prod, test []arrow
	unclassified := map[string]bool{}
	for _, p := range pkgs {
		// The benches measure the tree from outside it and may import
		// anything of it.
		from, ok := rel(p.ImportPath)
		if !ok || strings.HasPrefix(from, "bench/") {
			continue
		}
		fl, ok := classify(from)
		if !ok {
			unclassified[from] = true
			continue
		}
		scan := func(imports []string, seen map[string]bool) []arrow {
			var found []arrow
			for _, imp := range imports {
				to, ok := rel(imp)
				if !ok || seen[to] || to == from {
					continue
				}
				seen[to] = true
				tl, ok := classify(to)
				if !ok {
					unclassified[to] = true
				} else if why := backUp(fl, tl); why != "" {
					found = append(found, arrow{from, to, fl, tl, why})
				}
			}
			return found
		}
		seen := map[string]bool{}
		prod = append(prod, scan(p.Imports, seen)...)
		test = append(test, scan(append(p.TestImports, p.XTestImports...), seen)...)
	}
	fmt.Fprintln(w, "\n== import arrows that run back up (layers.go; see README.md)")
	for _, set := range []struct {
		name   string
		arrows []arrow
	}{{"non-test imports", prod}, {"test-only imports", test}} {
		fmt.Fprintf(w, "%s: %d\n", set.name, len(set.arrows))
		for _, a := range set.arrows {
			fmt.Fprintf(w, "  %-28s → %-28s %d→%d %s\n", a.from, a.to, a.fl.rank, a.tl.rank, a.why)
		}
	}
	names := slices.Sorted(maps.Keys(unclassified))
	fmt.Fprintf(w, "unclassified packages (add a row to layers.go): %d\n", len(names))
	for _, n := range names {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

func printRunnerDeps(w io.Writer, root string, rel func(string) (string, bool)) error {
	out, err := goCmd("list", "-deps", root+"/internal/runner")
	if err != nil {
		return err
	}
	deps := map[string]bool{}
	var names []string
	for _, line := range strings.Fields(out) {
		if path, ok := rel(line); ok && path != "internal/runner" {
			deps[path] = true
			names = append(names, path)
		}
	}
	fmt.Fprintf(w, "\n== Ferry packages internal/runner links (go list -deps): %d\n", len(names))
	for _, p := range []string{"internal/workspace", "internal/api", "internal/store", "internal/scheduler", "internal/autoscale"} {
		fmt.Fprintf(w, "  %-20s %v\n", p, deps[p])
	}
	fmt.Fprintf(w, "  all: %s\n", strings.Join(names, " "))
	return nil
}

// printDuplicates runs the duplicates command over root and prints its
// total line, its worst ten rows and what it says it left out.
func printDuplicates(w io.Writer, root string) {
	fmt.Fprintln(w, "\n== duplicates --most 200 --seconds 120")
	if _, err := exec.LookPath("duplicates"); err != nil {
		fmt.Fprintln(w, "duplicates is not on PATH: skipped")
		return
	}
	out, err := exec.Command("duplicates", "--repo", root, "--most", "200", "--seconds", "120").Output()
	if err != nil {
		fmt.Fprintf(w, "duplicates failed: %v\n", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var total int
	fmt.Sscan(lines[0], &total)
	fmt.Fprintf(w, "total pairs: %d\n%s\n", total, lines[0])
	rows, workspace := 0, 0
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "D"):
			rows++
			if rows <= 10 {
				fmt.Fprintln(w, l)
			}
			if strings.Contains(l, "internal/workspace/") {
				workspace++
			}
		case strings.HasPrefix(l, "left out:"), strings.HasPrefix(l, "incomplete:"):
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintf(w, "of the %d rows listed, %d have a side in internal/workspace/\n", rows, workspace)
}
