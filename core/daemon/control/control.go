// Package control is the wire protocol of the daemon's control API and its
// client: what `openstarry status` and `openstarry agent restart|stop` use,
// and what an agent's agent_manager tool uses to spawn, list and stop
// workers.
//
// The API is HTTP/1.1 over a unix socket, DATA/run/control.sock (0600), or
// on Windows over loopback TCP whose address is in DATA/run/control.addr.
// Every request carries "Authorization: Bearer TOKEN"; the token is made
// at each boot, written to DATA/run/control.token (0600) for the operator's
// commands and handed to the agents in OPENSTARRY_CONTROL_TOKEN, with the
// address in OPENSTARRY_CONTROL.
//
// Dependencies: the standard library and core/atomicfile (the token and
// address files), nothing of the daemon or the kernel, so that the daemon's
// clients (the CLI, the agent tools of core/daemon/agenttool) link only the
// protocol. The kernel (core/agent) never imports it.
package control

import (
	"encoding/json"
	"time"
)

// Environment variables handed to every agent the daemon spawns.
const (
	EnvAddr  = "OPENSTARRY_CONTROL"       // unix:///abs/path/control.sock or tcp://127.0.0.1:PORT
	EnvToken = "OPENSTARRY_CONTROL_TOKEN" // the per-boot bearer token
	// EnvAPIToken hands an agent the daemon's per-boot token for the
	// agent's own HTTP port: the agent requires it from every client,
	// loopback included, so that only the daemon reaches the port.
	EnvAPIToken = "OPENSTARRY_AGENT_API_TOKEN"
	// EnvProcs says that the daemon, not the operator, set GOMAXPROCS=1
	// in the agent's environment: the agent takes both out of its own
	// environment once started, so that what it runs does not inherit
	// them (see the daemon's launchSpec).
	EnvProcs = "OPENSTARRY_DAEMON_GOMAXPROCS"
)

// Files under DATA/run.
const (
	SocketFile = "control.sock"
	AddrFile   = "control.addr" // Windows: the TCP address
	TokenFile  = "control.token"
)

// Agent process states, as the daemon reports them.
const (
	StateStarting  = "starting"  // spawned, not yet hydrated and listening
	StateRunning   = "running"   // listening
	StateBackoff   = "backoff"   // crashed; waiting before the restart
	StateCrashloop = "crashloop" // crashed too often; waits for `openstarry agent restart`
	StateStopping  = "stopping"  // SIGTERM sent
	StateStopped   = "stopped"   // stopped on request
)

// Roles.
const (
	RoleMaster = "master"
	RoleWorker = "worker"
)

// ToolAgentManager is the tool a template must name for its agent to use
// POST /v1/manage at all.
const ToolAgentManager = "agent_manager"

// Actions of AgentRequest.
const (
	ActionSpawn = "spawn"
	ActionList  = "list"
	ActionStop  = "stop"
)

// AgentRequest is what the agent_manager tool asks of the daemon.
type AgentRequest struct {
	Action   string          `json:"action"`             // spawn, list, stop
	Template string          `json:"template,omitempty"` // spawn: worker template name
	AgentID  string          `json:"agent_id,omitempty"` // spawn: optional id; stop: required
	Task     json.RawMessage `json:"task,omitempty"`     // spawn: optional task JSON handed to the worker
}

// SpawnResult answers a spawn.
type SpawnResult struct {
	AgentID  string `json:"agent_id"`
	Template string `json:"template"`
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state"`
	// TaskID is the id of the task handed to the worker ("" without a
	// task). Its result comes back to the requester as a task of type
	// "worker_result" whose id is ResultTaskID.
	TaskID       string `json:"task_id,omitempty"`
	ResultTaskID string `json:"result_task_id,omitempty"`
}

// AgentInfo is one agent in a status answer.
type AgentInfo struct {
	ID              string `json:"id"`
	Role            string `json:"role"`
	Template        string `json:"template"`
	TemplateVersion string `json:"template_version,omitempty"`
	Source          string `json:"template_source,omitempty"` // remote, cache, local, embedded
	// Degraded is set when the template came from the cache because the
	// design layer could not be used (a degraded boot); DegradedReason
	// says why, as the daemon's log line does.
	Degraded       bool      `json:"degraded,omitempty"`
	DegradedReason string    `json:"degraded_reason,omitempty"`
	Requester      string    `json:"requester,omitempty"` // workers: who spawned it
	State          string    `json:"state"`
	PID            int       `json:"pid,omitempty"`
	Addr           string    `json:"addr,omitempty"` // the agent's HTTP API, http://127.0.0.1:PORT
	Restarts       int       `json:"restarts"`
	LastError      string    `json:"last_error,omitempty"`
	Since          time.Time `json:"since"` // when State was entered
	Recovered      bool      `json:"recovered,omitempty"`

	// From the agent's snapshot when it answered; Snapshot is false when
	// it did not.
	Snapshot       bool   `json:"snapshot"`
	Tick           uint64 `json:"tick"`
	Queue          int    `json:"queue"`
	Outbox         int    `json:"outbox"`
	SnapshotStatus string `json:"snapshot_status,omitempty"`
	// The newest answer in the agent's dialogue window: its task id and
	// its first 200 characters.
	LastTask   string `json:"last_task,omitempty"`
	LastResult string `json:"last_result,omitempty"`
	// From the agent's metrics: the damaged parts of its store's files its
	// scrubs found since it started, and those rewritten from a good copy
	// (docs/storage-damage.md).
	StoreDamage   uint64 `json:"store_damage,omitempty"`
	StoreRepaired uint64 `json:"store_repaired,omitempty"`
	// Current is the task the agent runs now (its GET /agents/{id}/current),
	// nil when idle or when it did not answer.
	Current *CurrentTask `json:"current_task,omitempty"`
}

// CurrentTask is the task an agent has in hand (agent.Current's JSON).
type CurrentTask struct {
	TaskID    string    `json:"task_id"`
	Step      int       `json:"step"`
	Phase     string    `json:"phase"`
	Tool      string    `json:"tool,omitempty"`
	Percent   int       `json:"progress_percent"`
	Tokens    int       `json:"tokens,omitempty"`
	Started   time.Time `json:"started"`
	ElapsedMs int64     `json:"elapsed_ms"`
	Updated   time.Time `json:"updated"`
}

// Interruption is an agent whose snapshot was not closed cleanly when the
// daemon booted.
type Interruption struct {
	AgentID string `json:"agent_id"`
	Tick    uint64 `json:"tick"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"` // it could not be read (locked, corrupt)
}

// Phase is one boot phase.
type Phase struct {
	N          int     `json:"n"`
	Name       string  `json:"name"`
	DurationMs float64 `json:"duration_ms"`
	Done       bool    `json:"done"`
}

// Status is the answer of GET /v1/status.
type Status struct {
	PID         int            `json:"pid"`
	Version     string         `json:"version"`
	Data        string         `json:"data"`
	Started     time.Time      `json:"started"`
	HTTP        string         `json:"http,omitempty"`
	Phases      []Phase        `json:"phases"`
	Agents      []AgentInfo    `json:"agents"`
	Interrupted []Interruption `json:"interrupted,omitempty"`
	// PreviousRun is how the daemon's previous run ended, from its boot
	// journal: none, clean, crash (no clean stop) or power_loss (no clean
	// stop, and the machine booted since).
	PreviousRun string      `json:"previous_run,omitempty"`
	StateStore  *StoreState `json:"state_store,omitempty"`
	// SessionsDamage counts the damaged parts of sessions.db the daemon's
	// scrubs found since it started (docs/storage-damage.md).
	SessionsDamage uint64 `json:"sessions_db_damage,omitempty"`
	// Notice is what the image's first boot could not do (a wrong
	// openstarry.yaml on the boot partition, a failed enrolment), from
	// DATA/boot-notice (docs/install.md); empty when all went well.
	Notice string `json:"notice,omitempty"`
}

// StoreState is the snapshot store as phase 1 found it.
type StoreState struct {
	URL     string `json:"url"`               // passwords redacted
	Durable bool   `json:"durable"`           // every Save is on stable storage when it returns
	Warning string `json:"warning,omitempty"` // why not, when not durable
}

// Error is the JSON body of a failed request, and the error the Client
// returns for it.
type Error struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"`
}

func (e *Error) Error() string { return e.Msg }

// Error codes.
const (
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden" // an agent's token, for what only the operator may do
	CodeBadRequest   = "bad_request"
	CodeUnknownAgent = "unknown_agent"
	CodeConflict     = "conflict" // the agent id is already running
	CodeTemplate     = "template" // the template could not be resolved or is not allowed
	CodeStopping     = "stopping" // the daemon is shutting down
	CodeInternal     = "internal"
)

// ResultTaskID is the id of the worker_result task that carries the result
// of taskID on worker back to its requester. It is deterministic, so that
// forwarding it again after a crash is a duplicate the requester drops.
func ResultTaskID(worker, taskID string) string {
	id := "worker_result:" + worker + ":" + taskID
	if len(id) <= 128 {
		return id
	}
	return "worker_result:" + hash16(worker+"\x00"+taskID)
}
