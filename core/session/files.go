package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// FileSchemaVersion is the schema_version of every JSON file written here.
const FileSchemaVersion = "1.0"

// maxFileBytes bounds a JSON file read back (a damaged file may be huge).
const maxFileBytes = 64 << 20

// ErrDamaged is wrapped when a JSON file cannot be decoded or fails its checks.
var ErrDamaged = errors.New("damaged file")

// Layout names the files of the data directory.
type Layout struct{ Data string }

// DB is DATA/sessions.db.
func (l Layout) DB() string { return filepath.Join(l.Data, "sessions.db") }

// Projects is DATA/projects.
func (l Layout) Projects() string { return filepath.Join(l.Data, "projects") }

// ProjectDir is DATA/projects/{id}.
func (l Layout) ProjectDir(id string) string { return filepath.Join(l.Projects(), id) }

// ProjectFile is DATA/projects/{id}/project.json.
func (l Layout) ProjectFile(id string) string { return filepath.Join(l.ProjectDir(id), "project.json") }

// SessionDir is DATA/projects/{p}/sessions/{s}.
func (l Layout) SessionDir(p, s string) string { return filepath.Join(l.ProjectDir(p), "sessions", s) }

// Checkpoint is …/state_checkpoint.json.
func (l Layout) Checkpoint(p, s string) string {
	return filepath.Join(l.SessionDir(p, s), "state_checkpoint.json")
}

// ApproachesFile is …/approaches.json.
func (l Layout) ApproachesFile(p, s string) string {
	return filepath.Join(l.SessionDir(p, s), "approaches.json")
}

// RemainingFile is …/remaining_tasks.json.
func (l Layout) RemainingFile(p, s string) string {
	return filepath.Join(l.SessionDir(p, s), "remaining_tasks.json")
}

// ResumeContextFile is …/resume_context.json: the context a resumed
// session's tasks carry, as it was handed.
func (l Layout) ResumeContextFile(p, s string) string {
	return filepath.Join(l.SessionDir(p, s), "resume_context.json")
}

// Artifacts is …/artifacts, where the session's tools write.
func (l Layout) Artifacts(p, s string) string { return filepath.Join(l.SessionDir(p, s), "artifacts") }

// ProjectFileJSON is project.json: the project and its plan as created.
type ProjectFileJSON struct {
	SchemaVersion string          `json:"schema_version"`
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	CreatedAt     time.Time       `json:"created_at"`
	Tasks         []PlanTaskEntry `json:"tasks"`
}

// PlanTaskEntry is a task as planned (project.json).
type PlanTaskEntry struct {
	ID         string          `json:"id"`
	Phase      int             `json:"phase"`
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input,omitempty"`
	DependsOn  []string        `json:"depends_on"`
	AssignedTo string          `json:"assigned_to,omitempty"`
	Approval   bool            `json:"approval,omitempty"`
}

// ActiveAgent is current_state.active_agent.
type ActiveAgent struct {
	Role    string `json:"role"`
	Type    string `json:"type"`
	AgentID string `json:"agent_id"`
}

// ActiveTask is current_state.active_task.
type ActiveTask struct {
	TaskID          string `json:"task_id"`
	Name            string `json:"name"`
	ProgressPercent int    `json:"progress_percent"`
}

// CurrentState is state_checkpoint.json's current_state.
type CurrentState struct {
	Phase       int          `json:"phase"`
	ActiveAgent *ActiveAgent `json:"active_agent"`
	ActiveTask  *ActiveTask  `json:"active_task"`
}

// TaskRef is an entry of completed_tasks, pending_tasks, remaining_tasks.
type TaskRef struct {
	TaskID    string `json:"task_id"`
	Status    string `json:"status"`
	Progress  *int   `json:"progress,omitempty"`
	BlockedBy string `json:"blocked_by,omitempty"`
}

// CheckpointFile is state_checkpoint.json: the specification's fields, then
// what a rebuild of sessions.db needs (the session row, every task row and
// the session's approvals).
type CheckpointFile struct {
	SchemaVersion      string       `json:"schema_version"`
	ProjectID          string       `json:"project_id"`
	SessionID          string       `json:"session_id"`
	Timestamp          time.Time    `json:"timestamp"`
	InterruptionReason *string      `json:"interruption_reason"`
	CurrentState       CurrentState `json:"current_state"`
	CompletedTasks     []TaskRef    `json:"completed_tasks"`
	PendingTasks       []TaskRef    `json:"pending_tasks"`
	RemainingTasks     []TaskRef    `json:"remaining_tasks"`
	ContextSummary     string       `json:"context_summary"`

	Session   *Session   `json:"session,omitempty"`
	Tasks     []PlanTask `json:"tasks,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`
}

// ApproachesFileJSON is approaches.json.
type ApproachesFileJSON struct {
	SchemaVersion string     `json:"schema_version"`
	SessionID     string     `json:"session_id"`
	LastUpdated   time.Time  `json:"last_updated"`
	Verified      []Approach `json:"verified"`
	Failed        []Approach `json:"failed"`
	Untried       []Approach `json:"untried"`
}

// RemainingFileJSON is remaining_tasks.json: the tasks not completed yet,
// in plan order.
type RemainingFileJSON struct {
	SchemaVersion  string          `json:"schema_version"`
	ProjectID      string          `json:"project_id"`
	SessionID      string          `json:"session_id"`
	LastUpdated    time.Time       `json:"last_updated"`
	RemainingTasks []RemainingTask `json:"remaining_tasks"`
}

// RemainingTask is one entry of remaining_tasks.json.
type RemainingTask struct {
	TaskID          string   `json:"task_id"`
	Name            string   `json:"name"`
	Phase           int      `json:"phase"`
	Status          string   `json:"status"`
	ProgressPercent int      `json:"progress_percent"`
	DependsOn       []string `json:"depends_on"`
	BlockedBy       string   `json:"blocked_by,omitempty"`
	AssignedTo      string   `json:"assigned_to,omitempty"`
}

// decodeFile is the strictness every file decoder shares: one JSON object,
// no trailing data, schema_version 1.0.
func decodeFile(data []byte, v any, version func() string) error {
	if len(data) > maxFileBytes {
		return fmt.Errorf("%w: %d bytes", ErrDamaged, len(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the JSON object", ErrDamaged)
	}
	if got := version(); got != FileSchemaVersion {
		return fmt.Errorf("%w: schema_version %q, want %q", ErrDamaged, got, FileSchemaVersion)
	}
	return nil
}

// DecodeProjectFile parses and checks project.json.
func DecodeProjectFile(data []byte) (*ProjectFileJSON, error) {
	var f ProjectFileJSON
	if err := decodeFile(data, &f, func() string { return f.SchemaVersion }); err != nil {
		return nil, err
	}
	if err := ValidateProjectID(f.ID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	seen := map[string]bool{}
	for i, t := range f.Tasks {
		if err := ValidatePlanTaskID(t.ID); err != nil {
			return nil, fmt.Errorf("%w: tasks[%d]: %v", ErrDamaged, i, err)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("%w: tasks[%d]: %s twice", ErrDamaged, i, t.ID)
		}
		seen[t.ID] = true
	}
	for i, t := range f.Tasks {
		for _, d := range t.DependsOn {
			if !seen[d] {
				return nil, fmt.Errorf("%w: tasks[%d]: depends on unknown %q", ErrDamaged, i, d)
			}
		}
	}
	return &f, nil
}

// DecodeCheckpoint parses and checks state_checkpoint.json.
func DecodeCheckpoint(data []byte) (*CheckpointFile, error) {
	var f CheckpointFile
	if err := decodeFile(data, &f, func() string { return f.SchemaVersion }); err != nil {
		return nil, err
	}
	if err := ValidateProjectID(f.ProjectID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if err := ValidateSessionID(f.SessionID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if f.Session != nil && (f.Session.ID != f.SessionID || f.Session.ProjectID != f.ProjectID) {
		return nil, fmt.Errorf("%w: session row names %s/%s", ErrDamaged, f.Session.ProjectID, f.Session.ID)
	}
	for i, t := range f.Tasks {
		if err := ValidatePlanTaskID(t.ID); err != nil {
			return nil, fmt.Errorf("%w: tasks[%d]: %v", ErrDamaged, i, err)
		}
		if !validTaskStatus(t.Status) {
			return nil, fmt.Errorf("%w: tasks[%d]: status %q", ErrDamaged, i, t.Status)
		}
	}
	for i, a := range f.Approvals {
		if !validApprovalStatus(a.Status) {
			return nil, fmt.Errorf("%w: approvals[%d]: status %q", ErrDamaged, i, a.Status)
		}
	}
	return &f, nil
}

// DecodeApproaches parses and checks approaches.json.
func DecodeApproaches(data []byte) (*ApproachesFileJSON, error) {
	var f ApproachesFileJSON
	if err := decodeFile(data, &f, func() string { return f.SchemaVersion }); err != nil {
		return nil, err
	}
	if err := ValidateSessionID(f.SessionID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	for _, list := range [][]Approach{f.Verified, f.Failed, f.Untried} {
		for i, a := range list {
			if err := validApproachID(a.ID); err != nil {
				return nil, fmt.Errorf("%w: approach %d: %v", ErrDamaged, i, err)
			}
		}
	}
	return &f, nil
}

// DecodeRemaining parses and checks remaining_tasks.json.
func DecodeRemaining(data []byte) (*RemainingFileJSON, error) {
	var f RemainingFileJSON
	if err := decodeFile(data, &f, func() string { return f.SchemaVersion }); err != nil {
		return nil, err
	}
	if err := ValidateSessionID(f.SessionID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	for i, t := range f.RemainingTasks {
		if err := ValidatePlanTaskID(t.TaskID); err != nil {
			return nil, fmt.Errorf("%w: remaining_tasks[%d]: %v", ErrDamaged, i, err)
		}
	}
	return &f, nil
}

func validTaskStatus(s string) bool {
	switch s {
	case TaskPending, TaskInProgress, TaskCompleted, TaskFailed, TaskBlocked:
		return true
	}
	return false
}

func validApprovalStatus(s string) bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalRejected, ApprovalRevision:
		return true
	}
	return false
}
