package spec

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles expr on its first use. Some of the patterns here
// expand into hundreds of states (x{0,254}); compiled in package init,
// every start of the binary paid for them, a job's runner and its shim
// included (bench/dispatch).
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
