package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// These errors can be returned by any Store. Backends wrap them with
// context ("session s-1: %w"); callers test with errors.Is.
var (
	// ErrNotFound is returned when a project, session, task or approval
	// does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a change does not fit the current
	// state (resuming a session that is not interrupted, deciding an
	// approval twice).
	ErrConflict = errors.New("conflict")
)

// Store keeps session continuity's records: projects, sessions, the plan's
// tasks, human approvals and approaches (seed 003's sessions.db). It is the
// plugin kind "sessionstore"; storage/sessionsql is the SQLite one, and
// storage/sessiontest the conformance suite every backend passes. Every
// method is safe for concurrent use; each change is durable when the
// method returns, and a method that changes several rows changes all of
// them or none.
type Store interface {
	// InsertProject adds a project with its first session (when sess is
	// not nil) and its plan, at once.
	InsertProject(ctx context.Context, p *Project, sess *Session, tasks []PlanTask) error
	// Projects lists every project, newest first, each with its newest
	// session's id and status.
	Projects(ctx context.Context) ([]Project, error)
	// Project returns one project, or an error wrapping ErrNotFound.
	Project(ctx context.Context, id string) (*Project, error)

	// InsertSession adds a session row as it is (a rebuild from the files).
	InsertSession(ctx context.Context, s *Session) error
	// UpdateSession writes every field of a session; ErrNotFound when
	// there is none with its id.
	UpdateSession(ctx context.Context, s *Session) error
	// Sessions lists a project's sessions, oldest first.
	Sessions(ctx context.Context, projectID string) ([]Session, error)
	// OpenSessions lists the sessions with no end, of every project.
	OpenSessions(ctx context.Context) ([]Session, error)
	// InterruptedSessions lists every session whose status is interrupted.
	InterruptedSessions(ctx context.Context) ([]Session, error)
	// Session returns one session, or an error wrapping ErrNotFound.
	Session(ctx context.Context, id string) (*Session, error)
	// StartChild marks parent resumed, adds child and writes the tasks it
	// takes over, at once; ErrConflict when the parent is not interrupted
	// (a concurrent resume took it).
	StartChild(ctx context.Context, parentID string, child *Session, tasks []PlanTask) error

	// PutTask inserts or replaces one task (by project and id).
	PutTask(ctx context.Context, t *PlanTask) error
	// PutTasks writes several tasks at once.
	PutTasks(ctx context.Context, ts []PlanTask) error
	// Tasks returns a project's plan in plan order, each with its
	// approval state (PlanTask.State).
	Tasks(ctx context.Context, projectID string) ([]PlanTask, error)

	// InsertApproval adds an approval, or returns the existing one for the
	// same task, attempt and checkpoint kind (the request is idempotent).
	// The approval of a task's later attempt starts its revision_history
	// with that of the task's previous approval. An approval with an ID
	// keeps it (a rebuild).
	InsertApproval(ctx context.Context, a *Approval) (*Approval, error)
	// SetApprovalResult gives a pending approval the result of the attempt
	// it is about and the artifacts that attempt wrote.
	SetApprovalResult(ctx context.Context, id int64, result json.RawMessage, artifacts []string) error
	// Approval returns one approval, or an error wrapping ErrNotFound.
	Approval(ctx context.Context, id int64) (*Approval, error)
	// ApprovalFor returns the approval of a task's attempt (the unknown
	// outcome one with unknown), or an error wrapping ErrNotFound.
	ApprovalFor(ctx context.Context, projectID, taskID string, attempt int, unknown bool) (*Approval, error)
	// Approvals lists approvals, oldest first: of a project when projectID
	// is set, with status when status is set.
	Approvals(ctx context.Context, projectID, status string) ([]Approval, error)
	// Decide resolves a pending approval (status, feedback, who, when) and
	// appends the round to its revision_history; ErrConflict when it is
	// not pending, ErrNotFound when there is none.
	Decide(ctx context.Context, id int64, status, feedback, by string, at time.Time) (*Approval, error)

	// PutApproach records an approach of a session.
	PutApproach(ctx context.Context, projectID, sessionID, kind string, a Approach, at time.Time) error
	// Approaches lists recorded approaches, oldest first: of a project,
	// or of one session when sessionID is set.
	Approaches(ctx context.Context, projectID, sessionID string) ([]RecordedApproach, error)

	// Check reads the store back from the disk (the daemon's scrub): the
	// damaged parts found, each naming its file, those repaired, and the
	// bytes checked.
	Check(ctx context.Context) (damage, repaired []string, checked int64, err error)
	// Close releases the store.
	Close() error
}

// StoreOpener opens the store kept in the file path (DATA/sessions.db),
// creating it when it is missing. It is the constructor of the plugins of
// kind plugin.KindSessionStore.
type StoreOpener func(ctx context.Context, path string) (Store, error)

// storeKind declares the kind sessionstore, before any store registers.
var storeKind = registry.DeclareKind(plugin.KindSessionStore, "session.StoreOpener", registry.Is[StoreOpener])

// RegisterStore registers a session store under name ("sqlite"): the
// plugin sessionstore.{name} of the one registry. It is called from init
// and panics on a duplicate, as plugin.Register does.
func RegisterStore(name, description string, open StoreOpener) {
	plugin.Register(plugin.Info{ID: string(plugin.KindSessionStore) + "." + name, Description: description, New: open})
}

// LookupStore returns the session store registered under name, or an error
// saying why there is none: a build tag that left it out
// (plugin.ErrNotCompiledIn: "session continuity is not compiled into this
// build (built with -tags nosqlite)..."), or no such plugin.
func LookupStore(name string) (StoreOpener, error) {
	id := string(plugin.KindSessionStore) + "." + name
	info, ok := plugin.Lookup(id)
	if !ok {
		if tag, out := plugin.Omitted()[id]; out {
			return nil, plugin.NotCompiledIn("session continuity", tag)
		}
		return nil, fmt.Errorf("session continuity: no session store %q in this build (built in: %s)", name, plugin.Names(plugin.KindSessionStore))
	}
	open, ok := info.New.(StoreOpener)
	if !ok {
		return nil, fmt.Errorf("session continuity: plugin %s is a %T, not a session.StoreOpener", id, info.New)
	}
	return open, nil
}
