// Package apperr is the errors Ferry's core returns to whoever called it:
// an Error carries a Code (invalid, not found, conflict, …) and a message
// safe to show a user, and the API layer turns the code into an HTTP
// status in one place. It is a leaf package so that the workspace and the
// packages it is built from (the asset registries) share one error type.
package apperr
