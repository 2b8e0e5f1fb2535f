package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one problem with a spec. Field is the dotted path of the
// field it is about ("inputs.data.path", "environment_variables.FOO"), empty
// when the problem is with the file as a whole; Line is the line of the YAML
// (or JSON) text where that field is, 0 when unknown. Message says what is
// wrong and what to do. The message is safe to show to the user who sent the
// spec: it never contains anything but what they sent.
type FieldError struct {
	Field   string `json:"field,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// Error formats the error as `field (line N): message`, leaving out what is
// unknown.
func (e *FieldError) Error() string {
	switch {
	case e.Field != "" && e.Line > 0:
		return fmt.Sprintf("%s (line %d): %s", e.Field, e.Line, e.Message)
	case e.Field != "":
		return e.Field + ": " + e.Message
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	}
	return e.Message
}

// Errors is every problem found in one spec. Parsers and Validate collect all
// of them rather than stopping at the first, so that a user fixes a file in
// one go. A nil or empty Errors is never returned as an error.
type Errors []*FieldError

// Error lists the problems one per line.
func (es Errors) Error() string {
	switch len(es) {
	case 0:
		return "no errors"
	case 1:
		return es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// add records a problem; args format the message.
func (es *Errors) add(field, format string, args ...any) {
	*es = append(*es, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// err returns es as an error, or nil when there is nothing in it, so that
// callers never get a non-nil error holding no problems.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// suggest returns the known name closest to name, or "" when none is close
// enough to be a likely typo. Case and '-' versus '_' are ignored.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	n := norm(name)
	best, bestD := "", -1
	for _, k := range known {
		d := editDistance(n, norm(k))
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 {
		return ""
	}
	limit := 2
	if len(n) <= 4 {
		limit = 1
	}
	if bestD > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes; field
// names are ASCII.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Nothing that long is a typo of a field name; skip the quadratic work.
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quote shows a value the user wrote, shortened so that a huge value does
// not flood the message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}

// joinNames lists names as `a, b and c`.
func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Suggest returns the known name closest to name, or "" when none is close
// enough to be a likely typo (case and '-' versus '_' ignored). It is for
// messages about names that are not fields, such as registered environments.
func Suggest(name string, known []string) string { return suggest(name, known) }
