//go:build !nosqlite

package daemon

import (
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/session"
)

// TestPlanNamespaceAgrees: the agents refuse from anyone but the daemon the
// namespace in which session continuity names plan tasks; the two
// packages, which do not import each other, must name the same one.
func TestPlanNamespaceAgrees(t *testing.T) {
	id := session.AgentTaskID("proj_20240115_a1b2c3", "sess_20240115143000_x1y2z3", "task_p1_a_001", 0)
	if session.AgentTaskPrefix != agent.PlanTaskPrefix || !agent.IsPlanTaskID(id) || agent.ValidateID(id) != nil {
		t.Fatalf("session %q, agent %q: %s", session.AgentTaskPrefix, agent.PlanTaskPrefix, id)
	}
	if session.TypeSessionSummary != agent.TaskTypeSessionSummary {
		t.Fatalf("summary task types differ: %q, %q", session.TypeSessionSummary, agent.TaskTypeSessionSummary)
	}
}
