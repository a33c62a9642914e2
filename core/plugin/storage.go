package plugin

import (
	"context"
	"errors"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// These errors can be returned by any Storage. Backends wrap them with
// context ("bbolt: load worker_007: %w"); callers test with errors.Is.
var (
	// ErrNotFound is returned by TaskIndex.TaskResult for an unknown task;
	// it is the kernel's agent.ErrNotFound, which the runtime tests for.
	// Storage.Load reports a missing agent as (nil, nil) instead.
	ErrNotFound = agent.ErrNotFound

	// ErrLocked is returned when another process holds the agent's store:
	// a store's own lock, a second line behind the one-process-per-agent
	// guard (core/host's AgentLock).
	ErrLocked = errors.New("store is locked by another process")

	// ErrCorrupt is returned by Load when no stored generation of the
	// snapshot passes its checksum. A backend never answers a corrupt
	// record with a blank agent.
	ErrCorrupt = errors.New("stored snapshot is corrupt")

	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("store is closed")
)

// ErrAgentCrashed is wrapped by the error of a task handed to an agent whose
// process ended without a clean stop while it held the task (the daemon's
// report to session continuity's dispatcher: session.ErrAgentCrashed).
var ErrAgentCrashed = errors.New("agent crashed")

// Storage keeps AgentSnapshots. It is the plugin kind "storage" of the
// specification. Implementations are safe for concurrent use by several
// agents; calls for one agent come from that agent's single owner goroutine.
type Storage interface {
	// Save stores s. It returns only after s is durable: after a crash at
	// any instant, Load returns either this snapshot or the one saved
	// before it, never a mix. A failed Save leaves the previous snapshot
	// in place.
	Save(ctx context.Context, s *agent.Snapshot) error

	// Load returns the agent's last saved snapshot, or nil, nil when there
	// is none. When the latest stored generation fails its checksum, Load
	// returns the previous good one and reports it through the backend's
	// logger; when none is good it returns an error wrapping ErrCorrupt.
	Load(ctx context.Context, agentID string) (*agent.Snapshot, error)

	// Delete removes everything stored for the agent. Deleting a missing
	// agent is not an error.
	Delete(ctx context.Context, agentID string) error

	// Close releases files, locks and connections. Methods called after
	// Close return ErrClosed.
	Close() error
}

// TaskIndex is implemented by backends that keep finished task results beside
// the snapshot, for the retention window. A backend that implements it writes,
// in the same durable Save, every Result of s.Outbox it has not indexed yet,
// so that a result is queryable from the moment its tick is saved until it
// falls out of retention, across restarts.
type TaskIndex interface {
	// TaskResult returns the stored result of a task, or an error wrapping
	// ErrNotFound.
	TaskResult(ctx context.Context, agentID, taskID string) (*agent.Result, error)
}

// Lister is implemented by backends that can enumerate their agents, which
// migration and the daemon's interruption scan need.
type Lister interface {
	List(ctx context.Context) ([]string, error)
}

// Retention bounds how many finished task results a TaskIndex keeps per
// agent and for how long.
type Retention struct {
	MaxTasks int   // default 10,000
	MaxAgeMs int64 // default 7 days
}

// DefaultRetention is the retention of the design: 10,000 tasks or 7 days.
var DefaultRetention = Retention{MaxTasks: 10000, MaxAgeMs: 7 * 24 * 3600 * 1000}

// Durability is implemented by stores whose Save may return before the data
// is on stable storage, depending on a server's settings (Redis without
// appendfsync always). Durability returns "" when every Save is durable when
// it returns, else why not. Stores that do not implement it fsync every Save.
type Durability interface {
	Durability() string
}

// Scrubber is implemented by stores that can check, while the agent runs,
// what their files hold on the disk: the agent's scrub
// (docs/storage-damage.md) calls it when the agent is idle, so that damage
// is found before a restart needs the data. Scrub reads the agent's data
// once, from the disk rather than the page cache where it can, and rewrites
// a damaged part from a good copy where one exists. An error means it could
// not check; damage is in the report.
type Scrubber interface {
	Scrub(ctx context.Context, agentID string) (ScrubReport, error)
}

// ScrubReport is what one Scrub found.
type ScrubReport struct {
	Bytes    int64    // bytes checked
	Damage   []string // each damaged part found, saying where
	Repaired []string // the parts of Damage rewritten from a good copy
}
