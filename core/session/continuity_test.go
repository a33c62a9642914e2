package session_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// The tests of issue 29 at the manager's level, against agentsFake, which
// answers a task id it has seen with the result it recorded, as an agent
// does. cmd/openstarry's TestSessionScenario drives the same through the
// real daemon and its real master.

func waitSession(t *testing.T, m *Manager, id, status string) Session {
	t.Helper()
	var s *Session
	wait.For(t, 10*time.Second, "session "+id+" "+status, func() bool {
		s, _ = m.Store().Session(context.Background(), id)
		return s != nil && s.Status == status
	})
	return *s
}

func pendingApproval(t *testing.T, m *Manager, projectID string, attempt int) Approval {
	t.Helper()
	var ap Approval
	wait.For(t, 10*time.Second, "a pending approval", func() bool {
		aps, _ := m.Approvals(context.Background(), projectID, ApprovalPending)
		if len(aps) == 1 {
			ap = aps[0]
		}
		return len(aps) == 1 && ap.Attempt == attempt
	})
	return ap
}

// Item 1: two projects with the same plan shape get their own results; a
// plan task's agent task id names its project, session and attempt.
func TestEqualPlansOfTwoProjects(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, t.TempDir(), &logbuf.Buffer{})
	ag := newAgentsFake()
	m.SetAgents(ag)
	a, err := m.CreateProject(ctx, plan(t, `{"name":"A","tasks":[{"phase":1,"type":"a","input":"first project input"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, a.SessionID, SessionCompleted)
	b, err := m.CreateProject(ctx, plan(t, `{"name":"B","tasks":[{"phase":1,"type":"a","input":"SECOND project input"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, b.SessionID, SessionCompleted)
	for _, tc := range []struct {
		v    *ProjectView
		want string
	}{{a, `"first project input"`}, {b, `"SECOND project input"`}} {
		got := taskOf(t, m, tc.v.ID, "task_p1_a_001")
		if string(got.Result) != tc.want || got.AgentTaskID != AgentTaskID(tc.v.ID, tc.v.SessionID, "task_p1_a_001", 0) {
			t.Errorf("project %s: result %s, agent task %s", tc.v.ID, got.Result, got.AgentTaskID)
		}
	}
}

// Item 2: a resume after a rejection retries the task as a new attempt,
// whose gate asks again; the retry gets the rejection's feedback.
func TestResumeAfterRejection(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, t.TempDir(), &logbuf.Buffer{})
	ag := newAgentsFake()
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a","input":"one"},
		{"phase":1,"type":"b","input":"two","approval":true,"depends_on":[0]},{"phase":2,"type":"c","input":"three"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ap := pendingApproval(t, m, v.ID, 0)
	if _, err := m.Decide(ctx, ap.ID, ApprovalRejected, "not like this"); err != nil {
		t.Fatal(err)
	}
	if s := waitSession(t, m, v.SessionID, SessionInterrupted); s.InterruptionReason != ReasonError {
		t.Fatalf("session %+v", s)
	}
	res, err := m.Resume(ctx, v.ID, v.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ap2 := pendingApproval(t, m, v.ID, 1)
	if s, _ := m.Store().Session(ctx, res.Session.ID); s.Status != SessionActive {
		t.Fatalf("the child session after its retry: %+v", s)
	}
	got := taskOf(t, m, v.ID, "task_p1_b_001")
	if got.Attempt != 1 || got.Feedback != "not like this" || got.AgentTaskID != AgentTaskID(v.ID, res.Session.ID, "task_p1_b_001", 1) {
		t.Fatalf("retried task %+v", got)
	}
	if _, err := m.Decide(ctx, ap2.ID, ApprovalApproved, ""); err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, res.Session.ID, SessionCompleted)
	if ag.count("task_p1_a_001") != 1 || ag.count("task_p1_b_001") != 2 || ag.count("task_p2_c_001") != 1 {
		t.Fatalf("runs %v", ag.runs)
	}
}

// Item 2: a task its agent failed is run again by the resume, not answered
// with the old failure.
func TestResumeAfterAgentFailure(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, t.TempDir(), &logbuf.Buffer{})
	ag := newAgentsFake()
	ag.fail["task_p1_a_001"] = true
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a","input":"one"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, v.SessionID, SessionInterrupted)
	ag.mu.Lock()
	ag.fail = map[string]bool{}
	ag.mu.Unlock()
	res, err := m.Resume(ctx, v.ID, v.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, res.Session.ID, SessionCompleted)
	if got := taskOf(t, m, v.ID, "task_p1_a_001"); got.Status != TaskCompleted || string(got.Result) != `"one"` || got.Attempt != 1 {
		t.Fatalf("task %+v", got)
	}
}

// Items 4, 5, 8: two revisions then an approval. The third approval's
// revision_history holds every round, oldest first, each with the result
// it reviewed; each approval carries its attempt's result and the
// artifacts it wrote; every round recorded an approach.
func TestRevisionHistoryAndApproaches(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	m := openManager(t, data, &logbuf.Buffer{})
	ag := &writingAgents{agentsFake: newAgentsFake(), m: m}
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"draft","input":"write it","approval":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	feedback := []string{"shorter", "friendlier"}
	for i, f := range feedback {
		ap := pendingApproval(t, m, v.ID, i)
		if len(ap.RevisionHistory) != i {
			t.Fatalf("approval of attempt %d: history %+v", i, ap.RevisionHistory)
		}
		if !strings.Contains(string(ap.Result), "write it") || string(ap.Artifacts) != `["projects/`+v.ID+`/sessions/`+v.SessionID+`/artifacts/draft.txt"]` {
			t.Fatalf("approval of attempt %d: result %s, artifacts %s", i, ap.Result, ap.Artifacts)
		}
		if _, err := m.DecideBy(ctx, ap.ID, ApprovalRevision, f, "ana"); err != nil {
			t.Fatal(err)
		}
	}
	ap := pendingApproval(t, m, v.ID, 2)
	if _, err := m.DecideBy(ctx, ap.ID, ApprovalApproved, "good", "ben"); err != nil {
		t.Fatal(err)
	}
	waitSession(t, m, v.SessionID, SessionCompleted)
	final, err := m.Store().Approval(ctx, ap.ID)
	if err != nil {
		t.Fatal(err)
	}
	h := final.RevisionHistory
	if len(h) != 3 || h[0].Feedback != "shorter" || h[1].Feedback != "friendlier" || h[2].Status != ApprovalApproved ||
		h[0].By != "ana" || h[2].By != "ben" || h[0].Attempt != 0 || h[1].Attempt != 1 || h[2].Attempt != 2 ||
		string(h[0].Result) != `"write it"` || !strings.Contains(string(h[1].Result), "shorter") || !strings.Contains(string(h[2].Result), "friendlier") {
		t.Fatalf("revision history %+v", h)
	}
	av, err := m.Approaches(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(av.Failed) != 2 || len(av.Verified) != 1 || av.Failed[0].Approach.Learnings[0] != "shorter" ||
		!strings.Contains(av.Failed[1].Approach.FailureReason, "friendlier") || av.Verified[0].Approach.Category != "draft" {
		t.Fatalf("approaches %+v", av)
	}
	var af ApproachesFileJSON
	if err := json.Unmarshal(mustRead(t, m.Layout().ApproachesFile(v.ID, v.SessionID)), &af); err != nil || len(af.Failed) != 2 || len(af.Verified) != 1 {
		t.Fatalf("approaches.json %+v %v", af, err)
	}
}

// writingAgents writes each task's output to the session's artifacts, as a
// file tool would.
type writingAgents struct {
	*agentsFake
	m *Manager
}

func (w *writingAgents) Run(ctx context.Context, agentID string, t AgentTask) (AgentResult, error) {
	res, err := w.agentsFake.Run(ctx, agentID, t)
	if err == nil {
		dir := w.m.Layout().Artifacts(t.ProjectID, t.SessionID)
		if werr := os.WriteFile(filepath.Join(dir, "draft.txt"), append([]byte(t.TaskID), '\n'), 0o600); werr != nil {
			return res, werr
		}
	}
	return res, err
}

// Item 6: one measure of progress.
func TestProgressOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tasks    []PlanTask
		done, pc int
	}{
		{"none", nil, 0, 0},
		{"one of three, one waiting at 100%", []PlanTask{{Status: TaskCompleted, ProgressPercent: 100},
			{Status: TaskInProgress, ProgressPercent: 100, State: WaitingForApproval}, {Status: TaskPending}}, 1, 33},
		{"one of three, a rejected one done by its agent", []PlanTask{{Status: TaskCompleted, ProgressPercent: 100},
			{Status: TaskFailed, ProgressPercent: 100}, {Status: TaskBlocked}}, 1, 33},
		{"two of three", []PlanTask{{Status: TaskCompleted}, {Status: TaskCompleted}, {Status: TaskInProgress, ProgressPercent: 90}}, 2, 66},
		{"all", []PlanTask{{Status: TaskCompleted}}, 1, 100},
	} {
		pv := ProgressOf(tc.tasks)
		if pv.Completed != tc.done || pv.Percent != tc.pc || pv.Total != len(tc.tasks) {
			t.Errorf("%s: %+v, want %d completed, %d%%", tc.name, pv, tc.done, tc.pc)
		}
	}
}

// Item 7: a session a dead daemon left open ends at the last moment it was
// known alive, not at the next boot.
func TestCrashEndsAtLastAlive(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, t.TempDir(), &logbuf.Buffer{})
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a"},{"phase":1,"type":"b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m.StopDispatch() // no agents: nothing runs
	now := time.Now().UTC()
	started, done := now.Add(-2*time.Hour), now.Add(-time.Hour)
	s, _ := m.Store().Session(ctx, v.SessionID)
	s.StartedAt = started
	if _, err := sqlDB(m).ExecContext(ctx, `UPDATE sessions SET started_at = ? WHERE id = ?`, ts(started), s.ID); err != nil {
		t.Fatal(err)
	}
	tk := taskOf(t, m, v.ID, "task_p1_a_001")
	tk.Status, tk.StartedAt, tk.CompletedAt = TaskCompleted, &started, &done
	if err := m.Store().PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(m.Layout().Checkpoint(v.ID, v.SessionID)) // its timestamp is now: the task's time is the last sign of life
	got, err := m.ScanInterrupted(ctx, ReasonCrash)
	if err != nil || len(got) != 1 {
		t.Fatalf("scan %v %v", got, err)
	}
	s, _ = m.Store().Session(ctx, v.SessionID)
	if s.EndedAt == nil || !s.EndedAt.Equal(done) {
		t.Fatalf("ended_at %v, want %v (the last task's completion)", s.EndedAt, done)
	}
}

// summaryAgents answers session_summary tasks as a model would.
type summaryAgents struct {
	*agentsFake
	answer string
}

func (a *summaryAgents) Run(ctx context.Context, agentID string, t AgentTask) (AgentResult, error) {
	if t.Type == TypeSessionSummary {
		out, _ := json.Marshal(a.answer)
		return AgentResult{Status: "done", Output: out}, nil
	}
	return a.agentsFake.Run(ctx, agentID, t)
}

func (a *summaryAgents) AgentType(string) string { return "code" }

// Item 7: the master writes context_summary; the counting line is the
// fallback (an empty answer here, as the echo brain's answer is the line
// itself); current_agent_type is the agent's type, active_agent names both.
func TestContextSummaryAndAgentType(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ answer, want string }{
		{"The draft is written; nothing is left.", "The draft is written; nothing is left."},
		{"", "1 of 1 tasks completed; last completed task_p1_a_001"},
	} {
		m := openManager(t, t.TempDir(), &logbuf.Buffer{})
		m.SetAgents(&summaryAgents{agentsFake: newAgentsFake(), answer: tc.answer})
		v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a","input":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		waitSession(t, m, v.SessionID, SessionCompleted)
		var s *Session
		wait.For(t, 10*time.Second, "the summary", func() bool {
			s, _ = m.Store().Session(ctx, v.SessionID)
			return s.ContextSummary == tc.want
		})
		if s.CurrentAgentType != "code" || s.CurrentAgentID != "master" || s.CurrentAgentRole != RoleLeader {
			t.Fatalf("session %+v", s)
		}
		m.Close(false)
		cp, err := DecodeCheckpoint(mustRead(t, m.Layout().Checkpoint(v.ID, v.SessionID)))
		if err != nil || cp.CurrentState.ActiveAgent == nil || *cp.CurrentState.ActiveAgent != (ActiveAgent{Role: RoleLeader, Type: "code", AgentID: "master"}) ||
			cp.ContextSummary != tc.want {
			t.Fatalf("checkpoint %+v %v", cp, err)
		}
	}
}
