package session

import (
	"context"
	"errors"
	"net/http"
)

// Error codes of the session API (transport/sessionapi) and of the
// agents' session tools (the daemon's control API).
const (
	CodeBadID       = "bad_id"
	CodeBadRequest  = "bad_request"
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeInternal    = "internal"
	CodeUnavailable = "unavailable"
)

// StatusOf maps an error of this package to an HTTP status and code.
func StatusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadID):
		return http.StatusBadRequest, CodeBadID
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}
