package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Decider puts the unknown outcome of an interrupted non-idempotent tool
// before a person, for the template's unknown_outcome "approval", when the
// task belongs to a project's session: session continuity records an
// approval request, and an operator decides it (`openstarry approval
// approve|reject`). The daemon's agents have one (over the daemon's control
// API); an agent without one, or a task of no session, ends the task
// unknown_outcome instead.
type Decider interface {
	// Ask raises the approval request of the interrupted call q, or finds
	// the one raised for the same task before, and returns its id.
	Ask(ctx context.Context, q UnknownOutcome) (int64, error)
	// Decision returns the state of approval id: Status "pending" until
	// a person decides.
	Decision(ctx context.Context, id int64) (Decision, error)
}

// ErrNoApproval is wrapped by a Decider's error when no approval can be
// raised or read for good (the task's project or the approval is not known,
// the daemon keeps no sessions): the task then ends unknown_outcome with
// that error instead of waiting. Any other error is retried with backoff.
var ErrNoApproval = errors.New("no approval can be raised or read")

// UnknownOutcome is the call whose outcome a crash left unknown, as it is
// put before an operator.
type UnknownOutcome struct {
	AgentID   string          `json:"agent_id"`
	TaskID    string          `json:"task_id"`
	ProjectID string          `json:"project_id"`
	SessionID string          `json:"session_id"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args,omitempty"`
}

// Decision is an approval's state: "pending", "approved", "rejected" or
// "revision_requested", with the operator's feedback.
type Decision struct {
	Status    string `json:"status"`
	Feedback  string `json:"feedback,omitempty"`
	DecidedBy string `json:"decided_by,omitempty"`
}

// Decision statuses, as session continuity names them.
const (
	DecisionPending  = "pending"
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
	DecisionRevision = "revision_requested"
)

// pendingInSession reports whether the task of the pending action belongs
// to a project's session (only such a task has an operator to ask).
func (st *state) pendingInSession() bool {
	s := st.snap
	if len(s.EventQueueBackup) == 0 || s.EventQueueBackup[0].ID != s.PendingAction.EventID {
		return false
	}
	var t Task
	return json.Unmarshal(s.EventQueueBackup[0].Payload, &t) == nil && inSession(&t)
}

// decide waits for an operator's decision on the call of log.Awaiting. It
// raises the approval request once (its id is saved in the turn, and the
// request is idempotent, so a crash in between raises no second one), then
// asks for the decision until there is one. Approved, or a revision asked:
// the call's result is the decision, the calls after it in the same reply
// are not run, the turn is saved, and the task goes on with the brain (status
// ""). Rejected: status failed, with msg. The task's deadline passing first:
// status unknown_outcome. aborted: the runtime stops; the next process asks
// again.
func (r *Runtime) decide(ev Event, task *Task, log *TurnLog, deadline time.Time) (status, msg string, aborted bool) {
	aw := log.Awaiting
	wait := r.cfg.RetryMin
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-r.stopCh:
			return false
		}
	}
	late := func() bool { return !deadline.IsZero() && r.cfg.Now().After(deadline) }
	for aw.ApprovalID == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := r.cfg.Decider.Ask(ctx, UnknownOutcome{AgentID: r.cfg.AgentID, TaskID: task.TaskID,
			ProjectID: task.ProjectID, SessionID: task.SessionID, Tool: aw.Tool, Args: aw.Args})
		cancel()
		if err == nil {
			aw.ApprovalID = id
			if r.checkpoint(ev, log, nil) != nil {
				return "", "", true
			}
			r.log.Warn().Str("task", task.TaskID).Str("tool", aw.Tool).Int64("approval", id).
				Msgf("unknown outcome of %s: approval %d waits for an operator (openstarry approval approve|reject %d)", aw.Tool, id, id)
			break
		}
		if errors.Is(err, ErrNoApproval) {
			r.log.Error().Err(err).Str("task", task.TaskID).Msg("no approval can be raised for an unknown outcome: the task ends unknown_outcome")
			return ResultUnknownOutcome, fmt.Sprintf("%s was interrupted by a crash; it may or may not have taken effect, and it is not run again: %v", aw.Tool, err), false
		}
		if late() {
			return ResultUnknownOutcome, fmt.Sprintf("%s was interrupted by a crash and no approval could be raised before the deadline: %v", aw.Tool, err), false
		}
		r.log.Warn().Err(err).Str("task", task.TaskID).Dur("retry_in", wait).Msg("raising the approval of an unknown outcome; retrying")
		if !sleep(jitter(wait)) {
			return "", "", true
		}
		wait = min(wait*2, r.cfg.RetryMax)
	}
	r.progress(task.TaskID, len(log.Steps), fmt.Sprintf("waiting for approval %d", aw.ApprovalID))
	var d Decision
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		d, err = r.cfg.Decider.Decision(ctx, aw.ApprovalID)
		cancel()
		if errors.Is(err, ErrNoApproval) {
			r.log.Error().Err(err).Str("task", task.TaskID).Int64("approval", aw.ApprovalID).Msg("the approval of an unknown outcome cannot be read: the task ends unknown_outcome")
			return ResultUnknownOutcome, fmt.Sprintf("%s was interrupted by a crash; it may or may not have taken effect, and it is not run again: approval %d: %v",
				aw.Tool, aw.ApprovalID, err), false
		}
		if err != nil {
			r.log.Warn().Err(err).Str("task", task.TaskID).Int64("approval", aw.ApprovalID).Msg("reading the decision; retrying")
		} else if d.Status != DecisionPending {
			break
		}
		if late() {
			return ResultUnknownOutcome, fmt.Sprintf("%s was interrupted by a crash and approval %d was not decided before the deadline %s",
				aw.Tool, aw.ApprovalID, task.Deadline), false
		}
		if !sleep(r.cfg.DecisionPoll) {
			return "", "", true
		}
	}
	r.log.Info().Str("task", task.TaskID).Int64("approval", aw.ApprovalID).Str("decision", d.Status).Str("by", d.DecidedBy).
		Msgf("approval %d of the unknown outcome of %s: %s", aw.ApprovalID, aw.Tool, d.Status)
	if d.Status == DecisionRejected {
		msg = fmt.Sprintf("%s was interrupted by a crash (outcome unknown) and the operator rejected going on (approval %d)", aw.Tool, aw.ApprovalID)
		if d.Feedback != "" {
			msg += ": " + d.Feedback
		}
		return ResultFailed, msg, false
	}
	out, _ := json.Marshal(map[string]any{
		"outcome":           "unknown",
		"operator_decision": d.Status,
		"feedback":          d.Feedback,
		"approval_id":       aw.ApprovalID,
		"note": "the agent stopped while " + aw.Tool + " was running, so it may or may not have taken effect; " +
			"it is not run again by itself. An operator reviewed it: follow the decision and the feedback.",
	})
	step := &log.Steps[len(log.Steps)-1]
	step.Results = append(step.Results, ToolResult{CallID: aw.CallID, Tool: aw.Tool, Output: out})
	notRun(step)
	log.Awaiting = nil
	if r.checkpoint(ev, log, nil) != nil {
		return "", "", true
	}
	return "", "", false
}
