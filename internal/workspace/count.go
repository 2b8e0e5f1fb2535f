package workspace

import "fmt"

// count is "1 thing" or "n things", for messages.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
