package apperr

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/ferry-ml/ferry/internal/store"
)

// Code classifies an error for whoever called the service: the API layer
// turns it into an HTTP status in one place.
type Code int

// Error codes.
const (
	CodeInternal     Code = iota // a fault of Ferry's; details are logged, not shown
	CodeInvalid                  // the request is wrong; the message says how
	CodeNotFound                 // a named thing does not exist
	CodeConflict                 // the thing exists or is in a state that forbids the request
	CodeUnauthorized             // no or unknown credentials
	CodeForbidden                // credentials that may not do this
	CodeTooLarge                 // a body or snapshot over its limit
	CodeUnavailable              // a part the request needs (a node's agent) did not answer in time
	CodeNoSpace                  // the server's disk is full; the caller keeps its data and retries
)

// Error is an error whose message is safe and useful to show a user.
type Error struct {
	Code Code
	Msg  string
	Err  error // cause, may be nil
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func newError(code Code, cause error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// Invalid returns a CodeInvalid error.
func Invalid(format string, args ...any) error { return newError(CodeInvalid, nil, format, args...) }

// NotFound returns a CodeNotFound error.
func NotFound(format string, args ...any) error { return newError(CodeNotFound, nil, format, args...) }

// Conflict returns a CodeConflict error.
func Conflict(format string, args ...any) error { return newError(CodeConflict, nil, format, args...) }

// Forbidden returns a CodeForbidden error.
func Forbidden(format string, args ...any) error {
	return newError(CodeForbidden, nil, format, args...)
}

// Unauthorized returns a CodeUnauthorized error.
func Unauthorized(format string, args ...any) error {
	return newError(CodeUnauthorized, nil, format, args...)
}

// Unavailable returns a CodeUnavailable error.
func Unavailable(format string, args ...any) error {
	return newError(CodeUnavailable, nil, format, args...)
}

// CodeOf returns the code of err: that of the first *Error in its chain, or
// CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, store.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return CodeNoSpace
	}
	return CodeInternal
}

// NoSpace turns a write that failed because the server's disk (or the data
// directory's quota) is full into a CodeNoSpace error that says so; other
// errors are returned as they are. what names what was being stored.
func NoSpace(err error, what string) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &Error{Code: CodeNoSpace, Err: err, Msg: fmt.Sprintf("the server's disk is full: %s was not stored; free space in the server's data directory (nothing is lost: runners keep what they could not send and send it again)", what)}
	}
	return err
}
