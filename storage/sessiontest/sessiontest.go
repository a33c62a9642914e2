// Package sessiontest is the conformance suite of session stores
// (session.Store, the plugin kind sessionstore), in the manner of
// storage/storagetest for snapshot stores: every backend runs Run from its
// own tests against real files. It checks what core/session relies on:
// round trips of every record, the sentinel errors (session.ErrNotFound,
// session.ErrConflict), the derived fields (a project's newest session, a
// task waiting for its approval), idempotent approvals, the revision
// history carried to a later attempt, atomic resume, durability across a
// reopen, and concurrent writers. RunBackup is the suite of the stores' JSON
// backup (session.Backup, the plugin kind sessionbackup).
package sessiontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/session"
)

// Harness says how to open the backend under test.
type Harness struct {
	// Open opens (creating it when missing) the store kept in path, a
	// file in a fresh t.TempDir; opening the same path again must find
	// what was stored. The suite closes what it opens.
	Open func(t *testing.T, path string) session.Store
}

// Run runs the whole suite against h, each case on its own store.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("sessiontest: Harness.Open is nil")
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"ProjectRoundTrip", testProjectRoundTrip},
		{"NotFound", testNotFound},
		{"Sessions", testSessions},
		{"StartChild", testStartChild},
		{"Tasks", testTasks},
		{"Approvals", testApprovals},
		{"RevisionHistory", testRevisionHistory},
		{"Approaches", testApproaches},
		{"Reopen", testReopen},
		{"Concurrent", testConcurrent},
		{"Check", testCheck},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h) })
	}
}

// at is a fixed instant of the fixtures; stores keep times in UTC.
var at = time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC)

const (
	projectID = "proj_20240115_a1b2c3"
	sessionID = "sess_20240115143000_x1y2z3"
	childID   = "sess_20240115150000_c1c2c3"
)

func open(t *testing.T, h Harness) (session.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sessions.db")
	st := h.Open(t, path)
	t.Cleanup(func() { _ = st.Close() })
	return st, path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixture is a project with its first session and a plan of three tasks,
// the second depending on the first.
func fixture() (*session.Project, *session.Session, []session.PlanTask) {
	p := &session.Project{ID: projectID, Name: "demo", Description: "a plan", CreatedAt: at}
	s := &session.Session{ID: sessionID, ProjectID: projectID, Status: session.SessionActive, StartedAt: at, CurrentPhase: 1}
	var tasks []session.PlanTask
	for i, typ := range []string{"concept", "design", "code"} {
		id, _ := session.PlanTaskID(1, typ, 1)
		t := session.PlanTask{ID: id, SessionID: sessionID, ProjectID: projectID, Seq: i, Phase: 1, TaskType: typ,
			Name: typ, Input: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i)), Status: session.TaskPending, DependsOn: []string{}}
		if i == 1 {
			t.DependsOn = []string{tasks[0].ID}
			t.Approval = true
		}
		tasks = append(tasks, t)
	}
	return p, s, tasks
}

func insertFixture(t *testing.T, st session.Store) []session.PlanTask {
	t.Helper()
	p, s, tasks := fixture()
	must(t, st.InsertProject(context.Background(), p, s, tasks))
	return tasks
}

func testProjectRoundTrip(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	want := insertFixture(t, st)
	p, err := st.Project(ctx, projectID)
	must(t, err)
	if p.ID != projectID || p.Name != "demo" || p.Description != "a plan" || !p.CreatedAt.Equal(at) ||
		p.SessionID != sessionID || p.Status != session.SessionActive {
		t.Fatalf("Project = %+v", p)
	}
	// A second project, created later, comes first.
	later := &session.Project{ID: "proj_20240116_zzzzzz", Name: "later", CreatedAt: at.Add(24 * time.Hour)}
	must(t, st.InsertProject(ctx, later, nil, nil))
	list, err := st.Projects(ctx)
	must(t, err)
	if len(list) != 2 || list[0].ID != later.ID || list[1].ID != projectID || list[0].SessionID != "" {
		t.Fatalf("Projects = %+v, want the later one first, without a session", list)
	}
	got, err := st.Tasks(ctx, projectID)
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("Tasks: %d, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Seq != w.Seq || g.Phase != w.Phase || g.TaskType != w.TaskType || g.Name != w.Name ||
			string(g.Input) != string(w.Input) || g.Status != w.Status || !slices.Equal(g.DependsOn, w.DependsOn) ||
			g.Approval != w.Approval || g.SessionID != sessionID || g.ProjectID != projectID {
			t.Errorf("task %d = %+v, want %+v", i, g, w)
		}
	}
	if empty, err := st.Tasks(ctx, "proj_20240101_nonexx"); err != nil || len(empty) != 0 {
		t.Fatalf("Tasks of an unknown project = %v, %v; want none", empty, err)
	}
}

func testNotFound(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	insertFixture(t, st)
	for name, err := range map[string]error{
		"Project":       second(st.Project(ctx, "proj_20240101_nonexx")),
		"Session":       second(st.Session(ctx, "sess_20240101000000_nonexx")),
		"Approval":      second(st.Approval(ctx, 999)),
		"ApprovalFor":   second(st.ApprovalFor(ctx, projectID, "task_p1_concept_001", 0, false)),
		"Decide":        second(st.Decide(ctx, 999, session.ApprovalApproved, "", "ops", at)),
		"UpdateSession": st.UpdateSession(ctx, &session.Session{ID: "sess_20240101000000_nonexx", Status: session.SessionActive}),
	} {
		if !errors.Is(err, session.ErrNotFound) {
			t.Errorf("%s of a missing record: %v, want session.ErrNotFound", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func testSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	insertFixture(t, st)
	s, err := st.Session(ctx, sessionID)
	must(t, err)
	if s.ProjectID != projectID || s.Status != session.SessionActive || !s.StartedAt.Equal(at) || s.EndedAt != nil || s.CurrentPhase != 1 {
		t.Fatalf("Session = %+v", s)
	}
	// A second, older session, already ended: inserted as it is.
	ended := at.Add(-time.Hour)
	old := &session.Session{ID: "sess_20240115133000_oooooo", ProjectID: projectID, Status: session.SessionCompleted,
		StartedAt: at.Add(-2 * time.Hour), EndedAt: &ended, ContextSummary: "done"}
	must(t, st.InsertSession(ctx, old))
	list, err := st.Sessions(ctx, projectID)
	must(t, err)
	if len(list) != 2 || list[0].ID != old.ID || list[1].ID != sessionID || list[0].EndedAt == nil || !list[0].EndedAt.Equal(ended) {
		t.Fatalf("Sessions = %+v, want the older first", list)
	}
	open, err := st.OpenSessions(ctx)
	must(t, err)
	if len(open) != 1 || open[0].ID != sessionID {
		t.Fatalf("OpenSessions = %+v", open)
	}
	// Every field of UpdateSession comes back.
	end := at.Add(time.Minute)
	s.EndedAt, s.Status, s.InterruptionReason = &end, session.SessionInterrupted, session.ReasonCrash
	s.CurrentPhase, s.CurrentAgentRole, s.CurrentAgentType, s.CurrentAgentID = 2, session.RoleWorker, "code", "worker_1"
	s.CurrentTaskID, s.ContextSummary = "task_p1_code_001", "halfway"
	must(t, st.UpdateSession(ctx, s))
	got, err := st.Session(ctx, sessionID)
	must(t, err)
	if got.EndedAt == nil || !got.EndedAt.Equal(end) || got.Status != s.Status || got.InterruptionReason != s.InterruptionReason ||
		got.CurrentPhase != 2 || got.CurrentAgentRole != s.CurrentAgentRole || got.CurrentAgentType != "code" ||
		got.CurrentAgentID != "worker_1" || got.CurrentTaskID != s.CurrentTaskID || got.ContextSummary != "halfway" {
		t.Fatalf("after UpdateSession: %+v, want %+v", got, s)
	}
	if open, err := st.OpenSessions(ctx); err != nil || len(open) != 0 {
		t.Fatalf("OpenSessions after the end = %+v, %v", open, err)
	}
	if list, err := st.InterruptedSessions(ctx); err != nil || len(list) != 1 || list[0].ID != sessionID {
		t.Fatalf("InterruptedSessions = %+v, %v", list, err)
	}
	if p, err := st.Project(ctx, projectID); err != nil || p.SessionID != sessionID || p.Status != session.SessionInterrupted {
		t.Fatalf("the project's newest session = %+v, %v", p, err)
	}
}

func testStartChild(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	tasks := insertFixture(t, st)
	child := &session.Session{ID: childID, ProjectID: projectID, ParentSessionID: sessionID, Status: session.SessionActive, StartedAt: at.Add(time.Hour)}
	// Not interrupted: refused, nothing written.
	if err := st.StartChild(ctx, sessionID, child, nil); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("StartChild of an active session: %v, want session.ErrConflict", err)
	}
	if _, err := st.Session(ctx, childID); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a refused StartChild left the child: %v", err)
	}
	s, err := st.Session(ctx, sessionID)
	must(t, err)
	end := at.Add(30 * time.Minute)
	s.Status, s.EndedAt, s.InterruptionReason = session.SessionInterrupted, &end, session.ReasonShutdown
	must(t, st.UpdateSession(ctx, s))
	moved := tasks[1:]
	for i := range moved {
		moved[i].SessionID = childID
	}
	must(t, st.StartChild(ctx, sessionID, child, moved))
	if p, err := st.Session(ctx, sessionID); err != nil || p.Status != session.SessionResumed {
		t.Fatalf("parent after StartChild = %+v, %v", p, err)
	}
	if c, err := st.Session(ctx, childID); err != nil || c.ParentSessionID != sessionID || c.Status != session.SessionActive {
		t.Fatalf("child = %+v, %v", c, err)
	}
	all, err := st.Tasks(ctx, projectID)
	must(t, err)
	if all[0].SessionID != sessionID || all[1].SessionID != childID || all[2].SessionID != childID {
		t.Fatalf("task sessions after StartChild: %s %s %s", all[0].SessionID, all[1].SessionID, all[2].SessionID)
	}
	// A second resume of the same parent (a concurrent one lost): refused.
	other := &session.Session{ID: "sess_20240115160000_d1d2d3", ProjectID: projectID, ParentSessionID: sessionID, Status: session.SessionActive, StartedAt: at.Add(2 * time.Hour)}
	if err := st.StartChild(ctx, sessionID, other, nil); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("second StartChild: %v, want session.ErrConflict", err)
	}
}

func testTasks(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	tasks := insertFixture(t, st)
	started, done := at.Add(time.Minute), at.Add(2*time.Minute)
	x := tasks[0]
	x.Status, x.ProgressPercent, x.AssignedTo, x.Attempt, x.AgentTaskID = session.TaskCompleted, 100, "worker_1", 1, "plan:x"
	x.StartedAt, x.CompletedAt, x.Result, x.Feedback, x.Error = &started, &done, json.RawMessage(`{"ok":true}`), "again", "once failed"
	must(t, st.PutTask(ctx, &x))
	got, err := st.Tasks(ctx, projectID)
	must(t, err)
	g := got[0]
	if g.Status != x.Status || g.ProgressPercent != 100 || g.AssignedTo != "worker_1" || g.Attempt != 1 || g.AgentTaskID != "plan:x" ||
		g.StartedAt == nil || !g.StartedAt.Equal(started) || g.CompletedAt == nil || !g.CompletedAt.Equal(done) ||
		string(g.Result) != `{"ok":true}` || g.Feedback != "again" || g.Error != "once failed" {
		t.Fatalf("after PutTask: %+v", g)
	}
	if len(got) != 3 {
		t.Fatalf("PutTask of an existing task added one: %d tasks", len(got))
	}
	// PutTasks writes several; a new id is added in plan order.
	y, z := got[1], got[2]
	y.Status, z.Status = session.TaskInProgress, session.TaskBlocked
	extra := session.PlanTask{ID: "task_p2_test_001", SessionID: sessionID, ProjectID: projectID, Seq: 3, Phase: 2, TaskType: "test",
		Status: session.TaskPending, DependsOn: []string{z.ID}}
	must(t, st.PutTasks(ctx, []session.PlanTask{y, z, extra}))
	got, err = st.Tasks(ctx, projectID)
	must(t, err)
	if len(got) != 4 || got[1].Status != session.TaskInProgress || got[2].Status != session.TaskBlocked || got[3].ID != extra.ID ||
		!slices.Equal(got[3].DependsOn, []string{z.ID}) {
		t.Fatalf("after PutTasks: %+v", got)
	}
	// A task in progress with a pending approval of its attempt waits for it.
	_, err = st.InsertApproval(ctx, &session.Approval{SessionID: sessionID, ProjectID: projectID, TaskID: y.ID, Attempt: y.Attempt,
		CheckpointType: "task_review", LeaderID: "master", Status: session.ApprovalPending, SubmittedAt: at})
	must(t, err)
	got, err = st.Tasks(ctx, projectID)
	must(t, err)
	if got[1].State != session.WaitingForApproval || got[0].State != "" {
		t.Fatalf("states: %q %q, want %q for the task under review", got[0].State, got[1].State, session.WaitingForApproval)
	}
}

func pending(taskID string, attempt int) *session.Approval {
	return &session.Approval{SessionID: sessionID, ProjectID: projectID, TaskID: taskID, Attempt: attempt, CheckpointType: "task_review",
		LeaderID: "master", Status: session.ApprovalPending, SubmittedAt: at, InstructionContent: "review it",
		WorkerInstructions: json.RawMessage(`["a"]`), Artifacts: json.RawMessage(`["out.txt"]`)}
}

func testApprovals(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	tasks := insertFixture(t, st)
	a, err := st.InsertApproval(ctx, pending(tasks[1].ID, 0))
	must(t, err)
	if a.ID <= 0 || a.Status != session.ApprovalPending || a.InstructionContent != "review it" || a.TaskID != tasks[1].ID ||
		!a.SubmittedAt.Equal(at) || len(a.RevisionHistory) != 0 {
		t.Fatalf("InsertApproval = %+v", a)
	}
	// The same task and attempt again: the same approval.
	again, err := st.InsertApproval(ctx, pending(tasks[1].ID, 0))
	must(t, err)
	if again.ID != a.ID {
		t.Fatalf("a second request for the same attempt made approval %d, want %d", again.ID, a.ID)
	}
	// An unknown outcome of the same attempt is another approval.
	u := pending(tasks[1].ID, 0)
	u.CheckpointType = session.CheckpointUnknownOutcome
	unknown, err := st.InsertApproval(ctx, u)
	must(t, err)
	if unknown.ID == a.ID {
		t.Fatal("the unknown-outcome approval of an attempt is its review approval")
	}
	if got, err := st.ApprovalFor(ctx, projectID, tasks[1].ID, 0, false); err != nil || got.ID != a.ID {
		t.Fatalf("ApprovalFor = %+v, %v; want %d", got, err, a.ID)
	}
	if got, err := st.ApprovalFor(ctx, projectID, tasks[1].ID, 0, true); err != nil || got.ID != unknown.ID {
		t.Fatalf("ApprovalFor(unknown) = %+v, %v; want %d", got, err, unknown.ID)
	}
	// The attempt's result and the artifacts it wrote, added to those named.
	must(t, st.SetApprovalResult(ctx, a.ID, json.RawMessage(`{"v":1}`), []string{"out.txt", "more.txt"}))
	got, err := st.Approval(ctx, a.ID)
	must(t, err)
	var arts []string
	if err := json.Unmarshal(got.Artifacts, &arts); err != nil || !slices.Equal(arts, []string{"out.txt", "more.txt"}) || string(got.Result) != `{"v":1}` {
		t.Fatalf("after SetApprovalResult: artifacts %s (%v), result %s", got.Artifacts, err, got.Result)
	}
	// Decide once; a second decision conflicts.
	d, err := st.Decide(ctx, a.ID, session.ApprovalApproved, "fine", "ops", at.Add(time.Minute))
	must(t, err)
	if d.Status != session.ApprovalApproved || d.Feedback != "fine" || d.DecidedBy != "ops" || d.ResolvedAt == nil ||
		!d.ResolvedAt.Equal(at.Add(time.Minute)) || len(d.RevisionHistory) != 1 || d.RevisionHistory[0].By != "ops" ||
		d.RevisionHistory[0].Status != session.ApprovalApproved || d.RevisionHistory[0].ApprovalID != a.ID {
		t.Fatalf("Decide = %+v", d)
	}
	if _, err := st.Decide(ctx, a.ID, session.ApprovalRejected, "", "ops", at); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("a second decision: %v, want session.ErrConflict", err)
	}
	// Listing: all, by status, by project.
	all, err := st.Approvals(ctx, "", "")
	must(t, err)
	if len(all) != 2 || all[0].ID != a.ID {
		t.Fatalf("Approvals = %+v", all)
	}
	if p, err := st.Approvals(ctx, projectID, session.ApprovalPending); err != nil || len(p) != 1 || p[0].ID != unknown.ID {
		t.Fatalf("pending approvals = %+v, %v", p, err)
	}
	if none, err := st.Approvals(ctx, "proj_20240101_nonexx", ""); err != nil || len(none) != 0 {
		t.Fatalf("approvals of another project = %+v, %v", none, err)
	}
	// A rebuild keeps the id the files name.
	kept := pending(tasks[2].ID, 0)
	kept.ID = 77
	if got, err := st.InsertApproval(ctx, kept); err != nil || got.ID != 77 {
		t.Fatalf("InsertApproval with an id = %+v, %v; want id 77", got, err)
	}
}

func testRevisionHistory(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	tasks := insertFixture(t, st)
	first, err := st.InsertApproval(ctx, pending(tasks[1].ID, 0))
	must(t, err)
	_, err = st.Decide(ctx, first.ID, session.ApprovalRevision, "shorter", "ann", at.Add(time.Minute))
	must(t, err)
	// The next attempt's approval starts with the rounds before it.
	next, err := st.InsertApproval(ctx, pending(tasks[1].ID, 1))
	must(t, err)
	if len(next.RevisionHistory) != 1 || next.RevisionHistory[0].Feedback != "shorter" || next.RevisionHistory[0].By != "ann" {
		t.Fatalf("revision_history of attempt 1 = %+v, want the round of attempt 0", next.RevisionHistory)
	}
	d, err := st.Decide(ctx, next.ID, session.ApprovalApproved, "", "bob", at.Add(2*time.Minute))
	must(t, err)
	if len(d.RevisionHistory) != 2 || d.RevisionHistory[0].Attempt != 0 || d.RevisionHistory[1].Attempt != 1 || d.RevisionHistory[1].By != "bob" {
		t.Fatalf("revision_history after the second round = %+v", d.RevisionHistory)
	}
}

func testApproaches(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	insertFixture(t, st)
	child := &session.Session{ID: childID, ProjectID: projectID, Status: session.SessionActive, StartedAt: at.Add(time.Hour)}
	must(t, st.InsertSession(ctx, child))
	yes := true
	must(t, st.PutApproach(ctx, projectID, sessionID, session.ApproachFailed, session.Approach{ID: "approach_a", Description: "tried A",
		FailureReason: "slow", Learnings: []string{"cache"}, Avoid: &yes}, at))
	must(t, st.PutApproach(ctx, projectID, childID, session.ApproachVerified, session.Approach{ID: "approach_b", Description: "B works"}, at.Add(time.Minute)))
	// The same id in the same session is the same approach.
	must(t, st.PutApproach(ctx, projectID, sessionID, session.ApproachFailed, session.Approach{ID: "approach_a", Description: "tried A twice",
		FailureReason: "slow", Avoid: &yes}, at.Add(2*time.Minute)))
	all, err := st.Approaches(ctx, projectID, "")
	must(t, err)
	if len(all) != 2 {
		t.Fatalf("Approaches = %+v, want 2", all)
	}
	byID := map[string]session.RecordedApproach{}
	for _, a := range all {
		byID[a.Approach.ID] = a
	}
	if a := byID["approach_a"]; a.Kind != session.ApproachFailed || a.SessionID != sessionID || a.Approach.Description != "tried A twice" ||
		a.Approach.Avoid == nil || !*a.Approach.Avoid {
		t.Fatalf("approach_a = %+v", a)
	}
	one, err := st.Approaches(ctx, projectID, childID)
	must(t, err)
	if len(one) != 1 || one[0].Approach.ID != "approach_b" || one[0].Kind != session.ApproachVerified {
		t.Fatalf("approaches of the child = %+v", one)
	}
}

// testReopen: what was stored is there after Close and a new Open.
func testReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sessions.db")
	st := h.Open(t, path)
	tasks := insertFixture(t, st)
	a, err := st.InsertApproval(ctx, pending(tasks[1].ID, 0))
	must(t, err)
	_, err = st.Decide(ctx, a.ID, session.ApprovalApproved, "ok", "ops", at)
	must(t, err)
	must(t, st.PutApproach(ctx, projectID, sessionID, session.ApproachUntried, session.Approach{ID: "approach_c", Description: "C"}, at))
	must(t, st.Close())
	st = h.Open(t, path)
	defer st.Close()
	if p, err := st.Project(ctx, projectID); err != nil || p.Name != "demo" {
		t.Fatalf("project after reopen = %+v, %v", p, err)
	}
	if ts, err := st.Tasks(ctx, projectID); err != nil || len(ts) != len(tasks) {
		t.Fatalf("tasks after reopen = %d, %v", len(ts), err)
	}
	if got, err := st.Approval(ctx, a.ID); err != nil || got.Status != session.ApprovalApproved || got.DecidedBy != "ops" {
		t.Fatalf("approval after reopen = %+v, %v", got, err)
	}
	if list, err := st.Approaches(ctx, projectID, ""); err != nil || len(list) != 1 {
		t.Fatalf("approaches after reopen = %+v, %v", list, err)
	}
	// A new approval after the reopen does not take an old id.
	b, err := st.InsertApproval(ctx, pending(tasks[2].ID, 0))
	must(t, err)
	if b.ID == a.ID {
		t.Fatalf("an approval after reopen took id %d again", a.ID)
	}
}

// testConcurrent: several writers at once (the dispatchers of several
// projects, the API, the agents' tools) lose nothing.
func testConcurrent(t *testing.T, h Harness) {
	ctx := context.Background()
	st, _ := open(t, h)
	tasks := insertFixture(t, st)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				task := session.PlanTask{ID: fmt.Sprintf("task_p3_w%d_%03d", w, i), SessionID: sessionID, ProjectID: projectID,
					Seq: 10 + w*each + i, Phase: 3, TaskType: "w", Status: session.TaskPending}
				if err := st.PutTask(ctx, &task); err != nil {
					errs <- err
				}
				if _, err := st.InsertApproval(ctx, pending(task.ID, 0)); err != nil {
					errs <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := st.Tasks(ctx, projectID)
	must(t, err)
	if len(got) != len(tasks)+writers*each {
		t.Fatalf("%d tasks after concurrent writes, want %d", len(got), len(tasks)+writers*each)
	}
	aps, err := st.Approvals(ctx, projectID, "")
	must(t, err)
	if len(aps) != writers*each {
		t.Fatalf("%d approvals after concurrent writes, want %d", len(aps), writers*each)
	}
}

// testCheck: a healthy store reads back without damage.
func testCheck(t *testing.T, h Harness) {
	st, _ := open(t, h)
	insertFixture(t, st)
	damage, _, n, err := st.Check(context.Background())
	if err != nil || len(damage) != 0 || n <= 0 {
		t.Fatalf("Check of a healthy store = %v, %d bytes, %v", damage, n, err)
	}
}
