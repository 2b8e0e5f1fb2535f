// Package spec reads and validates Azure ML CLI v2 job and compute files.
//
// Parsing is strict: unknown fields, wrong types and invalid values are
// errors that name the field (as a dotted path, with the YAML line where
// known) and say what to write instead. Validation collects every problem,
// not just the first.
package spec

import (
	"fmt"
	"strings"
)

// FieldError is one problem with one field.
type FieldError struct {
	Field   string `json:"field"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (e *FieldError) Error() string {
	where := e.Field
	if where == "" {
		where = "(document)"
	}
	if e.Line > 0 {
		where += fmt.Sprintf(" (line %d)", e.Line)
	}
	return where + ": " + e.Message
}

// Errors is every problem found in one spec.
type Errors []*FieldError

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// errs collects field errors.
type errs struct{ list Errors }

func (e *errs) add(field string, line int, format string, args ...any) {
	e.list = append(e.list, &FieldError{Field: field, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	return e.list
}
