package envcatalog

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles expr on its first use. Compiled in package init,
// patterns like x{0,254} (hundreds of states) cost every start of the
// binary, a job's runner and its shim included (bench/dispatch), whether
// or not the process ever checks a name.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
