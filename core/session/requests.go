package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// The requests the manager takes (from the session API, the CLI and the
// agents' session tools) and their strict decoders; no HTTP here
// (transport/sessionapi serves them).

// ErrBadRequest is wrapped by every error of a request body or argument.
var ErrBadRequest = errors.New("bad request")

// maxBodyBytes bounds a request body.
const maxBodyBytes = 1 << 20

// CreateRequest is the body of POST /projects.
type CreateRequest struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Tasks       []TaskSpec `json:"tasks"`
}

// TaskSpec is one task of a plan as submitted.
type TaskSpec struct {
	Phase      int             `json:"phase"`
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input"`
	DependsOn  []DepRef        `json:"depends_on"`
	AssignedTo string          `json:"assigned_to"`
	Approval   bool            `json:"approval"`
}

// DepRef is a dependency: the index of an earlier task in the request, or
// a generated task id.
type DepRef struct {
	Index int
	ID    string
}

// UnmarshalJSON accepts a number (index) or a string (task id).
func (d *DepRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		d.Index = -1
		return json.Unmarshal(b, &d.ID)
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return fmt.Errorf("depends_on: want a task index (0, 1, …) or a task id, got %s", ClipID(string(b)))
	}
	d.Index = n
	return nil
}

// MarshalJSON writes the form it was given.
func (d DepRef) MarshalJSON() ([]byte, error) {
	if d.ID != "" || d.Index < 0 {
		return json.Marshal(d.ID)
	}
	return json.Marshal(d.Index)
}

// strictDecode decodes one JSON object with no unknown fields and nothing after it.
func strictDecode(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxBodyBytes+1))
	if err != nil {
		return fmt.Errorf("%w: reading the body: %v", ErrBadRequest, err)
	}
	if len(data) > maxBodyBytes {
		return fmt.Errorf("%w: body larger than %d bytes", ErrBadRequest, maxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s", ErrBadRequest, jsonerr.Describe("body", err))
	}
	if dec.More() {
		return fmt.Errorf("%w: body: data after the JSON object", ErrBadRequest)
	}
	return nil
}

// DecodeCreateRequest parses and checks the body of POST /projects.
func DecodeCreateRequest(r io.Reader) (*CreateRequest, error) {
	var req CreateRequest
	if err := strictDecode(r, &req); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Name) == "" {
		return nil, fmt.Errorf("%w: name is required", ErrBadRequest)
	}
	if len(req.Name) > 200 || len(req.Description) > 10000 {
		return nil, fmt.Errorf("%w: name (200 bytes) or description (10,000 bytes) too long", ErrBadRequest)
	}
	if len(req.Tasks) == 0 {
		return nil, fmt.Errorf("%w: tasks: a plan needs at least one task", ErrBadRequest)
	}
	if len(req.Tasks) > 999 {
		return nil, fmt.Errorf("%w: tasks: %d, at most 999", ErrBadRequest, len(req.Tasks))
	}
	for i, t := range req.Tasks {
		if t.Phase < 1 || t.Phase > 999 {
			return nil, fmt.Errorf("%w: tasks[%d].phase %d: want 1 to 999", ErrBadRequest, i, t.Phase)
		}
		if !taskTypeRe().MatchString(t.Type) {
			return nil, fmt.Errorf("%w: tasks[%d].type %q: want a lower-case letter then up to 31 lower-case letters or digits", ErrBadRequest, i, ClipID(t.Type))
		}
		if t.AssignedTo != "" && agent.ValidateID(t.AssignedTo) != nil {
			return nil, fmt.Errorf("%w: tasks[%d].assigned_to %q: not an agent id", ErrBadRequest, i, ClipID(t.AssignedTo))
		}
		if len(t.Input) > 0 && !json.Valid(t.Input) {
			return nil, fmt.Errorf("%w: tasks[%d].input is not JSON", ErrBadRequest, i)
		}
		for _, d := range t.DependsOn {
			if d.ID == "" && d.Index >= i {
				return nil, fmt.Errorf("%w: tasks[%d].depends_on %d: a task depends only on earlier ones", ErrBadRequest, i, d.Index)
			}
			if d.ID != "" {
				if err := ValidatePlanTaskID(d.ID); err != nil {
					return nil, fmt.Errorf("%w: tasks[%d].depends_on: %v", ErrBadRequest, i, err)
				}
			}
		}
	}
	return &req, nil
}

// Decision is the body of POST /approvals/{id}.
type Decision struct {
	Decision string `json:"decision"` // approve, reject, revise
	Feedback string `json:"feedback"`
	// DecidedBy names who decides (optional; up to 128 printable
	// characters).
	DecidedBy string `json:"decided_by,omitempty"`
}

// DecodeDecision parses and checks the body of POST /approvals/{id}; it
// returns the approval status the decision sets.
func DecodeDecision(r io.Reader) (*Decision, string, error) {
	var d Decision
	if err := strictDecode(r, &d); err != nil {
		return nil, "", err
	}
	if len(d.Feedback) > 64<<10 {
		return nil, "", fmt.Errorf("%w: feedback longer than 64 KiB", ErrBadRequest)
	}
	d.DecidedBy = strings.TrimSpace(d.DecidedBy)
	if err := ValidDecider(d.DecidedBy); err != nil {
		return nil, "", err
	}
	switch d.Decision {
	case "approve", "approved":
		return &d, ApprovalApproved, nil
	case "reject", "rejected":
		return &d, ApprovalRejected, nil
	case "revise", "revision", "revision_requested":
		if strings.TrimSpace(d.Feedback) == "" {
			return nil, "", fmt.Errorf("%w: a revision request needs feedback", ErrBadRequest)
		}
		return &d, ApprovalRevision, nil
	}
	return nil, "", fmt.Errorf("%w: decision %q: want approve, reject or revise", ErrBadRequest, ClipID(d.Decision))
}

// ParseApprovalID checks an approval id from a path.
func ParseApprovalID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%w: approval id %q: want a positive integer", ErrBadID, ClipID(s))
	}
	return n, nil
}

// ApprovalRequest is what the approval_request tool sends.
type ApprovalRequest struct {
	ProjectID          string          `json:"project_id"`
	SessionID          string          `json:"session_id"`
	TaskID             string          `json:"task_id"` // the agent task id
	LeaderID           string          `json:"leader_id"`
	CheckpointType     string          `json:"checkpoint_type"`
	InstructionContent string          `json:"instruction_content"`
	WorkerInstructions json.RawMessage `json:"worker_instructions"`
	Artifacts          json.RawMessage `json:"artifacts"`
}

// UnknownOutcomeRequest is what an agent sends when a crash left the
// outcome of a non-idempotent tool of its task unknown and its template
// puts that before an operator.
type UnknownOutcomeRequest struct {
	ProjectID string          `json:"project_id"`
	SessionID string          `json:"session_id"`
	TaskID    string          `json:"task_id"` // the agent task id
	LeaderID  string          `json:"leader_id"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args,omitempty"`
}

// ApproachRecord is what the approach_record tool sends.
type ApproachRecord struct {
	ProjectID string   `json:"project_id"`
	SessionID string   `json:"session_id"`
	Kind      string   `json:"kind"` // verified, failed, untried
	Approach  Approach `json:"approach"`
}

// TaskUpdate is what the task_update tool sends.
type TaskUpdate struct {
	ProjectID       string    `json:"project_id"`
	SessionID       string    `json:"session_id"`
	TaskID          string    `json:"task_id"` // a plan task id or an agent task id
	ProgressPercent *int      `json:"progress_percent,omitempty"`
	Status          string    `json:"status,omitempty"` // in_progress or blocked
	DependsOn       *[]string `json:"depends_on,omitempty"`
	Add             *TaskSpec `json:"add,omitempty"`
}

// DecodeToolRequest decodes one of the tool requests strictly and checks
// its project and session ids.
func DecodeToolRequest(data []byte, v any) error {
	if err := strictDecode(bytes.NewReader(data), v); err != nil {
		return err
	}
	var p, s string
	switch x := v.(type) {
	case *ApprovalRequest:
		p, s = x.ProjectID, x.SessionID
		if x.CheckpointType == "" {
			x.CheckpointType = "review"
		}
		if x.CheckpointType == CheckpointUnknownOutcome {
			return fmt.Errorf("%w: checkpoint_type %s is raised by the agent itself after a crash, not by a tool", ErrBadRequest, CheckpointUnknownOutcome)
		}
		for _, raw := range []json.RawMessage{x.WorkerInstructions, x.Artifacts} {
			if len(raw) > 0 && string(raw) != "null" && bytes.TrimSpace(raw)[0] != '[' {
				return fmt.Errorf("%w: worker_instructions and artifacts are JSON arrays", ErrBadRequest)
			}
		}
	case *UnknownOutcomeRequest:
		p, s = x.ProjectID, x.SessionID
		if x.Tool == "" || len(x.Tool) > 200 || x.TaskID == "" {
			return fmt.Errorf("%w: an unknown outcome names its task_id and tool", ErrBadRequest)
		}
		if len(x.Args) > 0 && !json.Valid(x.Args) {
			return fmt.Errorf("%w: args is not JSON", ErrBadRequest)
		}
	case *ApproachRecord:
		p, s = x.ProjectID, x.SessionID
		switch x.Kind {
		case ApproachVerified, ApproachFailed, ApproachUntried:
		default:
			return fmt.Errorf("%w: kind %q: want verified, failed or untried", ErrBadRequest, ClipID(x.Kind))
		}
		if strings.TrimSpace(x.Approach.Description) == "" {
			return fmt.Errorf("%w: an approach needs a description", ErrBadRequest)
		}
		if x.Approach.ID != "" {
			if err := validApproachID(x.Approach.ID); err != nil {
				return fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
		}
	case *TaskUpdate:
		p, s = x.ProjectID, x.SessionID
		if x.ProgressPercent != nil && (*x.ProgressPercent < 0 || *x.ProgressPercent > 100) {
			return fmt.Errorf("%w: progress_percent %d: want 0 to 100", ErrBadRequest, *x.ProgressPercent)
		}
		switch x.Status {
		case "", TaskInProgress, TaskBlocked, TaskPending:
		default:
			return fmt.Errorf("%w: status %q: an agent sets in_progress, pending or blocked (the plan sets completed and failed from results)", ErrBadRequest, ClipID(x.Status))
		}
		if x.DependsOn != nil {
			for _, d := range *x.DependsOn {
				if err := ValidatePlanTaskID(d); err != nil {
					return fmt.Errorf("%w: depends_on: %v", ErrBadRequest, err)
				}
			}
		}
	default:
		return fmt.Errorf("%w: unknown request %T", ErrBadRequest, v)
	}
	if err := ValidateProjectID(p); err != nil {
		return fmt.Errorf("%w: %v (the tool runs only within a project's task)", ErrBadRequest, err)
	}
	if err := ValidateSessionID(s); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

// ValidDecider accepts up to 128 printable characters of UTF-8.
func ValidDecider(s string) error {
	if len(s) > 128 || !utf8.ValidString(s) {
		return fmt.Errorf("%w: decided_by: at most 128 bytes of UTF-8", ErrBadRequest)
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("%w: decided_by: printable characters only", ErrBadRequest)
		}
	}
	return nil
}
