package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestUnknownOutcomeApproval: the approval an agent raises for an unknown
// outcome is its own (beside the task's gate), raised once per task
// attempt however often the agent asks, survives a rebuild of sessions.db,
// and its decision leaves the plan task to the agent's result; a tool may
// not raise one.
func TestUnknownOutcomeApproval(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	m.SetAgents(newAgentsFake())
	v, err := m.CreateProject(ctx, plan(t, `{"name":"u","tasks":[{"phase":1,"type":"a","input":"a","approval":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var gate []Approval
	wait.For(t, 10*time.Second, "the gate", func() bool {
		gate, _ = m.Approvals(ctx, v.ID, ApprovalPending)
		return len(gate) == 1
	})
	req := &UnknownOutcomeRequest{ProjectID: v.ID, SessionID: v.SessionID, TaskID: "task_p1_a_001", LeaderID: "master",
		Tool: "file_append", Args: json.RawMessage(`{"file":"x","line":"y"}`)}
	a, err := m.RequestUnknownOutcome(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.RequestUnknownOutcome(ctx, req)
	if err != nil || again.ID != a.ID || a.ID == gate[0].ID {
		t.Fatalf("asked twice: %+v %v (gate %d)", again, err, gate[0].ID)
	}
	if a.CheckpointType != CheckpointUnknownOutcome || a.Status != ApprovalPending || !strings.Contains(a.InstructionContent, "file_append") ||
		!strings.Contains(string(a.WorkerInstructions), `"line":"y"`) {
		t.Fatalf("approval %+v", a)
	}
	if d, err := m.Decide(ctx, a.ID, ApprovalApproved, "checked"); err != nil || d.Status != ApprovalApproved {
		t.Fatalf("decide: %+v %v", d, err)
	}
	// The plan task still waits for its gate: the decision went to the
	// agent, not to the plan.
	if got := taskOf(t, m, v.ID, "task_p1_a_001"); got.Status != TaskInProgress || got.State != WaitingForApproval {
		t.Fatalf("task after the decision %+v", got)
	}
	read, err := m.Store().Approval(ctx, a.ID)
	if err != nil || read.Feedback != "checked" {
		t.Fatalf("read back %+v %v", read, err)
	}
	// A tool cannot raise one, and a request names its tool.
	var ar ApprovalRequest
	if err := DecodeToolRequest([]byte(`{"project_id":"`+v.ID+`","session_id":"`+v.SessionID+`","task_id":"task_p1_a_001","checkpoint_type":"unknown_outcome"}`), &ar); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("approval_request with checkpoint_type unknown_outcome: %v", err)
	}
	var ur UnknownOutcomeRequest
	if err := DecodeToolRequest([]byte(`{"project_id":"`+v.ID+`","session_id":"`+v.SessionID+`","task_id":"task_p1_a_001"}`), &ur); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown outcome without a tool: %v", err)
	}
	// Both approvals of the task come back from the files when
	// sessions.db is lost.
	if err := m.Close(false); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Layout().DB()); err != nil {
		t.Fatal(err)
	}
	m = openManager(t, data, logs)
	m.SetAgents(newAgentsFake())
	all, err := m.Approvals(ctx, v.ID, "")
	if err != nil || len(all) != 2 || all[1].ID != a.ID || all[1].CheckpointType != CheckpointUnknownOutcome || all[1].Status != ApprovalApproved ||
		all[0].Status != ApprovalPending {
		t.Fatalf("after the rebuild: %+v %v", all, err)
	}
	if _, err := m.Decide(ctx, gate[0].ID, ApprovalApproved, ""); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the task completed by its gate", func() bool {
		return taskOf(t, m, v.ID, "task_p1_a_001").Status == TaskCompleted
	})
}
