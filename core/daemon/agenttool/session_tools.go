package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/tool"
)

// ServiceSessions is the Env.Services key of the SessionService.
const ServiceSessions = "sessions"

// SessionService is what the session tools need of their host: the
// daemon's control API (a *control.Client satisfies it), which records
// approvals, approaches and plan changes in sessions.db. Without one in
// Env.Services the tools dial the daemon named by the environment.
type SessionService interface {
	Session(ctx context.Context, requester, op string, req any) (json.RawMessage, error)
}

func init() {
	tool.Register(tool.Tool{
		Name: "approval_request",
		Description: `Ask a person to approve the current task's work. args: {"checkpoint_type": e.g. "design", ` +
			`"instruction_content": what is to be approved, "worker_instructions": [...], "artifacts": [paths]}. ` +
			`When the task's answer is in, the task waits (WAITING_FOR_APPROVAL) for the decision: approved completes it, ` +
			`rejected fails it, a revision runs it again with the feedback. Idempotent: the same task and attempt get the same approval.`,
		Idempotent: true,
		Run:        approvalRequest,
	})
	tool.Register(tool.Tool{
		Name: "approach_record",
		Description: `Record an approach in the session's approaches.json. args: {"kind": "verified"|"failed"|"untried", ` +
			`"id": optional approach_..., "category", "description" (required), "details": {...}, "evidence": {...}, ` +
			`"failure_reason", "error", "learnings": [...], "reusable", "avoid", "priority", "next_to_try", "note"}. ` +
			`Idempotent: the same id (or, without one, the same kind, category and description) is the same record.`,
		Idempotent: true,
		Run:        approachRecord,
	})
	tool.Register(tool.Tool{
		Name: "task_update",
		Description: `Update a task of the project's plan. args: {"task_id": default the current task, "progress_percent": 0-100, ` +
			`"status": "in_progress"|"pending"|"blocked", "depends_on": [task ids]} or {"add": {"phase", "type", "name", ` +
			`"input", "depends_on": [task ids], "assigned_to", "approval"}} to add a task. Idempotent: values are set, not added.`,
		Idempotent: true,
		Run:        taskUpdate,
	})
}

var errNoSession = errors.New("this task belongs to no project session (it has no project_id and session_id)")

func sessionCall(ctx context.Context, env tool.Env, op string, req map[string]any) (json.RawMessage, error) {
	if env.ProjectID == "" || env.SessionID == "" {
		return nil, errNoSession
	}
	req["project_id"], req["session_id"] = env.ProjectID, env.SessionID
	s, _ := env.Services[ServiceSessions].(SessionService)
	return callSession(ctx, s, env.AgentID, op, req)
}

// callSession runs one session operation on s, or, when s is nil, on the
// daemon's control API dialled for this request.
func callSession(ctx context.Context, s SessionService, requester, op string, req any) (json.RawMessage, error) {
	if s == nil {
		c, err := control.FromEnv()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		s = c
	}
	return s.Session(ctx, requester, op, req)
}

func approvalRequest(ctx context.Context, env tool.Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		CheckpointType     string          `json:"checkpoint_type"`
		InstructionContent string          `json:"instruction_content"`
		WorkerInstructions json.RawMessage `json:"worker_instructions"`
		Artifacts          json.RawMessage `json:"artifacts"`
	}
	if err := tool.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	return sessionCall(ctx, env, "approval", map[string]any{"task_id": env.TaskID, "checkpoint_type": args.CheckpointType,
		"instruction_content": args.InstructionContent, "worker_instructions": orNull(args.WorkerInstructions),
		"artifacts": orNull(args.Artifacts)})
}

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}

func approachRecord(ctx context.Context, env tool.Env, raw json.RawMessage) (json.RawMessage, error) {
	var args map[string]json.RawMessage
	if err := tool.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	var kind string
	if err := json.Unmarshal(args["kind"], &kind); err != nil {
		return nil, errors.New(`"kind" is required: "verified", "failed" or "untried"`)
	}
	delete(args, "kind")
	return sessionCall(ctx, env, "approach", map[string]any{"kind": kind, "approach": args})
}

func taskUpdate(ctx context.Context, env tool.Env, raw json.RawMessage) (json.RawMessage, error) {
	var args map[string]json.RawMessage
	if err := tool.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	req := map[string]any{"task_id": env.TaskID}
	for k, v := range args {
		req[k] = v
	}
	return sessionCall(ctx, env, "task", req)
}

// Interface guard.
var _ SessionService = (*control.Client)(nil)

// Decider is the agent.Decider of the daemon's agents: it raises the
// approval of an unknown outcome in session continuity, and reads its
// decision, through the daemon's control API.
type Decider struct {
	// Service is the daemon; nil: the daemon named by the environment,
	// dialled for each request.
	Service SessionService
}

func (d Decider) call(ctx context.Context, requester, op string, req any) (json.RawMessage, error) {
	out, err := callSession(ctx, d.Service, requester, op, req)
	var ce *control.Error
	if errors.As(err, &ce) && permanent(ce.Status) {
		return nil, fmt.Errorf("%w: %w", agent.ErrNoApproval, err)
	}
	return out, err
}

// permanent reports whether the daemon's answer will not change if asked
// again: a request it refuses, or sessions it does not keep.
func permanent(status int) bool {
	return status >= 400 && status < 500 && status != 408 && status != 429 || status == 501
}

// Ask implements agent.Decider.
func (d Decider) Ask(ctx context.Context, q agent.UnknownOutcome) (int64, error) {
	args := q.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	raw, err := d.call(ctx, q.AgentID, "unknown_outcome", map[string]any{"project_id": q.ProjectID, "session_id": q.SessionID,
		"task_id": q.TaskID, "tool": q.Tool, "args": args})
	if err != nil {
		return 0, err
	}
	var a struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.ID <= 0 {
		return 0, fmt.Errorf("the daemon's answer names no approval: %.200s", raw)
	}
	return a.ID, nil
}

// Decision implements agent.Decider.
func (d Decider) Decision(ctx context.Context, id int64) (agent.Decision, error) {
	raw, err := d.call(ctx, "", "decision", map[string]any{"approval_id": id})
	if err != nil {
		return agent.Decision{}, err
	}
	var out agent.Decision
	if err := json.Unmarshal(raw, &out); err != nil || out.Status == "" {
		return agent.Decision{}, fmt.Errorf("the daemon's answer holds no decision: %.200s", raw)
	}
	return out, nil
}

// Interface guard.
var _ agent.Decider = Decider{}
