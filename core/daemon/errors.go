package daemon

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// These errors are returned by the daemon's operations on agents (spawn,
// stop, restart, register); the control API and the HTTP listener choose
// the status and code of the answer from them (httpError), nowhere else.
var (
	// ErrStopping is returned for requests during shutdown.
	ErrStopping = errors.New("the daemon is stopping")
	// ErrBooting is returned for a spawn before boot phase 4.
	ErrBooting = errors.New("the daemon is still booting")
	// ErrBadRequest is wrapped when a request names no valid template,
	// agent id, requester or task.
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownAgent is wrapped when no agent of the id is supervised.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrConflict is wrapped when the agent id is already supervised.
	ErrConflict = errors.New("agent already supervised")
	// ErrForbidden is wrapped when an agent asks for what its blueprint
	// does not allow it (agent_manager without the tool, another's worker).
	ErrForbidden = errors.New("forbidden")
	// ErrNotWorker is wrapped when agent_manager is asked to stop an agent
	// that is not a worker.
	ErrNotWorker = errors.New("not a worker")
	// ErrTemplateRefused is wrapped when a template may not be spawned by
	// this requester or in this role.
	ErrTemplateRefused = errors.New("template refused")
	// ErrTemplate is wrapped when a template cannot be resolved.
	ErrTemplate = errors.New("template not resolved")
)

// refusal is an error whose message is for the operator and whose kind is
// one of the sentinels above.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

// refuse returns a refusal of kind with the formatted message.
func refuse(kind error, format string, a ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, a...)}
}

// httpError is the answer to err: a *control.Error as it is, a sentinel
// with its status and code, anything else 500 internal.
func httpError(err error) *control.Error {
	var ce *control.Error
	if errors.As(err, &ce) {
		return ce
	}
	for _, m := range []struct {
		kind   error
		status int
		code   string
	}{
		{ErrStopping, http.StatusServiceUnavailable, control.CodeStopping},
		{ErrBooting, http.StatusServiceUnavailable, control.CodeStopping},
		{ErrBadRequest, http.StatusBadRequest, control.CodeBadRequest},
		{ErrUnknownAgent, http.StatusNotFound, control.CodeUnknownAgent},
		{ErrConflict, http.StatusConflict, control.CodeConflict},
		{ErrForbidden, http.StatusForbidden, control.CodeForbidden},
		{ErrNotWorker, http.StatusForbidden, control.CodeBadRequest},
		{ErrTemplateRefused, http.StatusForbidden, control.CodeTemplate},
		{ErrTemplate, http.StatusUnprocessableEntity, control.CodeTemplate},
	} {
		if errors.Is(err, m.kind) {
			return &control.Error{Status: m.status, Code: m.code, Msg: err.Error()}
		}
	}
	return &control.Error{Status: http.StatusInternalServerError, Code: control.CodeInternal, Msg: err.Error()}
}
