package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// poolTypeNames are the `type:` names of the pool compute types. What sets
// each apart lives in its package under internal/compute and is asked
// through compute.Pool; a comparison with the name elsewhere is a branch
// the next type would have to find and extend.
var poolTypeNames = []string{"amlcompute", "computeinstance", "virtualmachine"}

// typeNamesAllowed are the directories whose code may spell those names:
// the compute file parser (the names are its YAML), each type's own
// package, and the store suite, whose records are data it stores and
// reads back, not a branch.
var typeNamesAllowed = []string{
	"internal/spec",
	"internal/compute/amlcompute",
	"internal/compute/computeinstance",
	"internal/compute/virtualmachine",
	"internal/store/storetest",
}

func TestNoPoolTypeNameBranches(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m: %v\n%s", err, out)
	}
	root := strings.TrimSpace(string(out))
	var checked int
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				for _, a := range typeNamesAllowed {
					if rel == a {
						return filepath.SkipDir
					}
				}
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			// Tests spell the names in the compute files they submit.
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			checked++
			for _, hit := range typeNameLiterals(t, path) {
				t.Errorf("%s:%d: %q names a pool compute type outside its package; ask the type's compute.Pool (workspace.Config.PoolTypes, server.PoolType) instead", rel, hit.line, hit.name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no Go files found under internal/ and cmd/")
	}
}

type typeNameHit struct {
	line int
	name string
}

// typeNameLiterals returns the string literals of file path that are a
// pool type's name.
func typeNameLiterals(t *testing.T, path string) []typeNameHit {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var hits []typeNameHit
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		for _, name := range poolTypeNames {
			if v == name {
				hits = append(hits, typeNameHit{fset.Position(lit.Pos()).Line, name})
			}
		}
		return true
	})
	return hits
}
