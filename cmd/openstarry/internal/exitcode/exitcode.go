// Package exitcode carries a process exit code through an error, from
// wherever openstarry's commands decide it (the command tree, the daemon's
// wiring, the updater) to main, which exits with it.
package exitcode

import "errors"

// The exit codes shared by several commands.
const (
	Failure = 1 // any error
	Locked  = 3 // another process runs this agent, or this daemon
)

// Error is an error with the exit code the process ends with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New wraps err so that the process exits with code.
func New(code int, err error) error { return &Error{Code: code, Err: err} }

// Of returns the exit code err carries: 0 for nil, 1 when it names none.
func Of(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Failure
}
