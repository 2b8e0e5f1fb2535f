// Package examples holds the example jobs, embedded so that `ferry
// quickstart` works from any directory with nothing but the binary.
package examples

import "embed"

// FS holds quickstart/ and hello/.
//
//go:embed quickstart hello
var FS embed.FS
