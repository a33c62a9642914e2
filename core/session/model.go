package session

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Task statuses (the tasks table).
const (
	TaskPending    = "pending"
	TaskInProgress = "in_progress"
	TaskCompleted  = "completed"
	TaskFailed     = "failed"
	TaskBlocked    = "blocked"
)

// Approval statuses (the human_approvals table).
const (
	ApprovalPending    = "pending"
	ApprovalApproved   = "approved"
	ApprovalRejected   = "rejected"
	ApprovalRevision   = "revision_requested"
	WaitingForApproval = "WAITING_FOR_APPROVAL" // the state of a task whose approval is pending
)

// CheckpointUnknownOutcome is the checkpoint_type of the approval an agent
// raises when a crash left the outcome of a non-idempotent tool of its task
// unknown (the template's unknown_outcome "approval"). Its decision goes
// back to the agent, which goes on (approved, or a revision asked: the model
// sees the decision and the feedback as the tool's result) or fails the task
// (rejected); the plan task's status then follows the agent's result, not
// the decision.
const CheckpointUnknownOutcome = "unknown_outcome"

// Session statuses. A session is active while it dispatches; it ends
// completed (every task completed) or interrupted (with a reason); an
// interrupted session that was resumed becomes resumed.
const (
	SessionActive      = "active"
	SessionCompleted   = "completed"
	SessionInterrupted = "interrupted"
	SessionResumed     = "resumed"
)

// Interruption reasons.
const (
	ReasonCrash     = "crash"      // the daemon or the agent died without a clean stop
	ReasonPowerLoss = "power_loss" // no clean stop, and the machine booted again since
	ReasonError     = "error"      // a task failed and the rest of the plan is blocked
	ReasonShutdown  = "shutdown"   // the daemon stopped cleanly before the plan was done
)

// Approach kinds (the sections of approaches.json).
const (
	ApproachVerified = "verified"
	ApproachFailed   = "failed"
	ApproachUntried  = "untried"
)

// Roles of the agent a task runs on.
const (
	RoleLeader = "LEADER" // the master agent
	RoleWorker = "WORKER"
)

// Project is a row of the projects table.
type Project struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	// Derived when read: the newest session and its status.
	SessionID string `json:"session_id,omitempty"`
	Status    string `json:"status,omitempty"`
}

// Session is a row of the sessions table.
type Session struct {
	ID                 string     `json:"id"`
	ProjectID          string     `json:"project_id"`
	ParentSessionID    string     `json:"parent_session_id,omitempty"`
	Status             string     `json:"status"`
	StartedAt          time.Time  `json:"started_at"`
	EndedAt            *time.Time `json:"ended_at,omitempty"`
	InterruptionReason string     `json:"interruption_reason,omitempty"`
	CurrentPhase       int        `json:"current_phase"`
	CurrentAgentRole   string     `json:"current_agent_role,omitempty"`
	CurrentAgentType   string     `json:"current_agent_type,omitempty"` // the agent's type (its template's type)
	CurrentAgentID     string     `json:"current_agent_id,omitempty"`
	CurrentTaskID      string     `json:"current_task_id,omitempty"`
	ContextSummary     string     `json:"context_summary,omitempty"`
}

// PlanTask is a row of the tasks table: one step of a project's plan.
type PlanTask struct {
	ID              string          `json:"id"`
	SessionID       string          `json:"session_id"`
	ProjectID       string          `json:"project_id"`
	Seq             int             `json:"seq"` // position in the plan, from 0
	Phase           int             `json:"phase"`
	TaskType        string          `json:"task_type"`
	Name            string          `json:"name"`
	Input           json.RawMessage `json:"input,omitempty"`
	Status          string          `json:"status"`
	State           string          `json:"state,omitempty"` // WAITING_FOR_APPROVAL while an approval is pending
	ProgressPercent int             `json:"progress_percent"`
	AssignedTo      string          `json:"assigned_to,omitempty"`
	DependsOn       []string        `json:"depends_on"`
	Approval        bool            `json:"approval,omitempty"`
	Attempt         int             `json:"attempt"`
	// AgentTaskID is the id the current attempt was handed to its agent
	// under (AgentTaskID), set when it is first handed; empty before.
	AgentTaskID string          `json:"agent_task_id,omitempty"`
	Feedback    string          `json:"feedback,omitempty"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	CompletedAt *time.Time      `json:"completed_at,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	// Role and Agent say who runs the task: LEADER and the master's id, or
	// WORKER and the worker's; filled when a project is read (GET
	// /projects/{id}), not stored.
	Role  string `json:"role,omitempty"`
	Agent string `json:"agent,omitempty"`
}

// AgentTaskPrefix opens every agent task id of a plan task: a namespace
// the agents keep for the daemon's dispatcher (agent.PlanTaskPrefix, the
// same string). A task sent straight to an agent (HTTP, MQTT, a webhook, a
// delegation) with an id in it is refused, so it can never pre-empt a plan
// task by choosing its id.
const AgentTaskPrefix = "plan:"

// AgentTaskID is the id under which attempt n of plan task id, first
// handed by session sessionID of project projectID, goes to an agent:
// plan:{project_id}:{session_id}:{task_id}:{attempt}. It is unique per
// project, session and attempt, so an agent's answer for an id it has seen
// (the result it recorded) is always that attempt's. The dispatcher keeps
// it with the task (PlanTask.AgentTaskID) while the attempt lasts: a task
// handed again, by a restarted dispatcher or a resumed session, goes under
// the same id and is not run twice.
func AgentTaskID(projectID, sessionID, id string, attempt int) string {
	return AgentTaskPrefix + projectID + ":" + sessionID + ":" + id + ":" + itoa(attempt)
}

// ParseAgentTaskID splits an agent task id of the plan: namespace; ok is
// false for any other id.
func ParseAgentTaskID(s string) (projectID, sessionID, taskID string, attempt int, ok bool) {
	rest, found := strings.CutPrefix(s, AgentTaskPrefix)
	if !found {
		return "", "", "", 0, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 4 || ValidateProjectID(parts[0]) != nil || ValidateSessionID(parts[1]) != nil ||
		ValidatePlanTaskID(parts[2]) != nil {
		return "", "", "", 0, false
	}
	n, err := strconv.Atoi(parts[3])
	if err != nil || n < 0 || strconv.Itoa(n) != parts[3] {
		return "", "", "", 0, false
	}
	return parts[0], parts[1], parts[2], n, true
}

// PlanTaskOf returns the plan task id of an agent task id (of the plan:
// namespace, or of the older form).
func PlanTaskOf(agentTaskID string) string {
	if _, _, id, _, ok := ParseAgentTaskID(agentTaskID); ok {
		return id
	}
	for i := len(agentTaskID) - 1; i > 0; i-- {
		if agentTaskID[i] == '.' {
			if i+1 < len(agentTaskID) && agentTaskID[i+1] == 'r' {
				return agentTaskID[:i]
			}
			break
		}
	}
	return agentTaskID
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Revision is one entry of an approval's revision_history: one round of
// review of a task. The approval of a task's later attempt carries the
// rounds of the earlier ones, oldest first.
type Revision struct {
	At         time.Time       `json:"at"`
	Status     string          `json:"status"`
	Feedback   string          `json:"feedback,omitempty"`
	Attempt    int             `json:"attempt"`
	By         string          `json:"by,omitempty"`          // who decided
	ApprovalID int64           `json:"approval_id,omitempty"` // the approval of that round
	Result     json.RawMessage `json:"result,omitempty"`      // what the attempt under review produced
}

// Approval is a row of the human_approvals table.
type Approval struct {
	ID                 int64           `json:"id"`
	SessionID          string          `json:"session_id"`
	ProjectID          string          `json:"project_id"`
	TaskID             string          `json:"task_id"`
	Attempt            int             `json:"attempt"`
	CheckpointType     string          `json:"checkpoint_type"`
	LeaderID           string          `json:"leader_id"`
	Status             string          `json:"status"`
	SubmittedAt        time.Time       `json:"submitted_at"`
	ResolvedAt         *time.Time      `json:"resolved_at,omitempty"`
	Feedback           string          `json:"feedback,omitempty"`
	InstructionContent string          `json:"instruction_content,omitempty"`
	WorkerInstructions json.RawMessage `json:"worker_instructions"`
	Artifacts          json.RawMessage `json:"artifacts"`
	RevisionHistory    []Revision      `json:"revision_history"`
	// Result is the result of the attempt under review (its agent's
	// output), set when the attempt is done.
	Result json.RawMessage `json:"result,omitempty"`
	// DecidedBy names who took the decision: the name a person gave, or
	// the address it came from when they gave none.
	DecidedBy string `json:"decided_by,omitempty"`
}

// Approach is one entry of approaches.json (any of the three kinds); the
// fields of each kind are those of the specification.
type Approach struct {
	ID            string          `json:"id"`
	Date          string          `json:"date,omitempty"`
	Category      string          `json:"category,omitempty"`
	Description   string          `json:"description"`
	Details       json.RawMessage `json:"details,omitempty"`
	Evidence      json.RawMessage `json:"evidence,omitempty"`
	FailureReason string          `json:"failure_reason,omitempty"`
	Error         string          `json:"error,omitempty"`
	Learnings     []string        `json:"learnings,omitempty"`
	Reusable      *bool           `json:"reusable,omitempty"`
	Avoid         *bool           `json:"avoid,omitempty"`
	Priority      string          `json:"priority,omitempty"`
	NextToTry     *bool           `json:"next_to_try,omitempty"`
	Note          string          `json:"note,omitempty"`
}

// RecordedApproach is an approach with the kind and session it was recorded in.
type RecordedApproach struct {
	Kind      string   `json:"kind"`
	SessionID string   `json:"session_id"`
	Approach  Approach `json:"approach"`
}
