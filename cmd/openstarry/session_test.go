//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// api calls the daemon's HTTP API and returns the status and body.
func api(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			b, _ = json.Marshal(body)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func apiInto(t *testing.T, method, url string, body any, want int, out any) {
	t.Helper()
	code, data := api(t, method, url, body)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, url, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
}

func project(t *testing.T, base, id string) session.ProjectView {
	t.Helper()
	var v session.ProjectView
	apiInto(t, "GET", base+"/projects/"+id, nil, 200, &v)
	return v
}

func taskStatus(v session.ProjectView, id string) session.PlanTask {
	for _, x := range v.Tasks {
		if x.ID == id {
			return x
		}
	}
	return session.PlanTask{}
}

// ledgerTask is a task whose agent appends its name to ledger.txt (the
// non-idempotent file_append) after the given calls.
func ledgerTask(phase int, typ, line string, deps []any, before ...map[string]any) map[string]any {
	calls := append(before, map[string]any{"tool": "file_append", "args": map[string]string{"file": "ledger.txt", "line": line}})
	t := map[string]any{"phase": phase, "type": typ, "name": line, "input": map[string]any{"call": calls}}
	if deps != nil {
		t["depends_on"] = deps
	}
	return t
}

// ledger counts the lines of every session's artifacts/ledger.txt.
func ledger(t *testing.T, data, projectID string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(data, "projects", projectID, "sessions", "*", "artifacts", "ledger.txt"))
	counts := map[string]int{}
	for _, f := range files {
		for l, n := range countLines(t, f) {
			counts[l] += n
		}
	}
	return counts
}

// sixTaskPlan: two phases, an approval gate through the approval_request
// tool, approaches recorded, and a slow task in phase 2 to kill the master in.
func sixTaskPlan() map[string]any {
	yes := true
	return map[string]any{"name": "six tasks", "description": "two phases, one gate", "tasks": []any{
		ledgerTask(1, "concept", "p1 concept", nil,
			map[string]any{"tool": "approach_record", "args": map[string]any{"kind": "verified", "category": "concept",
				"description": "three ideas from one prompt", "evidence": map[string]any{"type": "test_result", "passed": 3}, "reusable": yes}}),
		ledgerTask(1, "review", "p1 review", []any{0},
			map[string]any{"tool": "approval_request", "args": map[string]any{"checkpoint_type": "concept_review",
				"instruction_content": "approve the concept", "artifacts": []string{"ledger.txt"}}}),
		ledgerTask(1, "design", "p1 design", []any{1},
			map[string]any{"tool": "approach_record", "args": map[string]any{"kind": "failed", "category": "jump",
				"description": "velocity only", "failure_reason": "double jump", "avoid": yes}},
			map[string]any{"tool": "approach_record", "args": map[string]any{"kind": "untried", "category": "jump",
				"description": "raycast to the ground", "priority": "high", "next_to_try": yes}}),
		ledgerTask(2, "code", "p2 code 1", []any{"task_p1_design_001"}),
		ledgerTask(2, "code", "p2 code 2", []any{3},
			map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 3000}}),
		ledgerTask(2, "test", "p2 test", []any{4}),
	}}
}

func sessionDaemon(t *testing.T, data string) (*child, string) {
	t.Helper()
	c := startDaemon(t, daemonConfig(t, data, "sessions:\n  checkpoint_interval: 300ms\n"))
	return c, daemonStatus(t, data).HTTP
}

// TestSessionResume: a project of 6 tasks in 2 phases with an approval gate;
// the master is SIGKILLed in the middle of phase 2; the session is
// interrupted (crash); a resume (through the API, then the CLI) makes a
// child session that finishes the plan without redoing a completed task,
// and hands the master the approvals and approaches.
func TestSessionResume(t *testing.T) {
	for _, via := range []string{"api", "cli"} {
		t.Run(via, func(t *testing.T) { testSessionResume(t, via) })
	}
}

func testSessionResume(t *testing.T, via string) {
	data := dataDir(t)
	c, base := sessionDaemon(t, data)
	var v session.ProjectView
	apiInto(t, "POST", base+"/projects", sixTaskPlan(), 201, &v)
	if len(v.Tasks) != 6 || v.Tasks[4].ID != "task_p2_code_002" || v.Tasks[3].DependsOn[0] != "task_p1_design_001" {
		t.Fatalf("plan %+v", v.Tasks)
	}
	for _, x := range v.Tasks {
		if session.ValidatePlanTaskID(x.ID) != nil {
			t.Fatalf("task id %q", x.ID)
		}
	}
	if session.ValidateProjectID(v.ID) != nil || session.ValidateSessionID(v.SessionID) != nil {
		t.Fatalf("ids %s %s", v.ID, v.SessionID)
	}

	// The gate: the review task waits until a person approves.
	var aps []session.Approval
	wait.For(t, 20*time.Second, "the approval request", func() bool {
		apiInto(t, "GET", base+"/projects/"+v.ID+"/approvals?status=pending", nil, 200, &aps)
		return len(aps) == 1
	})
	if aps[0].TaskID != "task_p1_review_001" || aps[0].CheckpointType != "concept_review" || aps[0].LeaderID != "master" {
		t.Fatalf("approval %+v", aps[0])
	}
	if st := taskStatus(project(t, base, v.ID), "task_p1_review_001"); st.State != session.WaitingForApproval {
		t.Fatalf("review task %+v", st)
	}
	apiInto(t, "POST", fmt.Sprintf("%s/approvals/%d", base, aps[0].ID), map[string]string{"decision": "approve", "feedback": "the second idea"}, 200, nil)

	// Phase 2: kill the master while task_p2_code_002 sleeps.
	wait.For(t, 30*time.Second, "task_p2_code_002 in progress", func() bool {
		return taskStatus(project(t, base, v.ID), "task_p2_code_002").Status == session.TaskInProgress
	})
	wait.For(t, 10*time.Second, "the master running task_p2_code_002 (inside its 3 s sleep)", func() bool {
		code, st, err := getTask(base, "master", taskStatus(project(t, base, v.ID), "task_p2_code_002").AgentTaskID)
		return err == nil && code == 200 && st.Status == "running"
	})
	m, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var sess session.Session
	wait.For(t, 20*time.Second, "the session interrupted", func() bool {
		var ss []session.Session
		apiInto(t, "GET", base+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
		sess = ss[0]
		return sess.Status == session.SessionInterrupted
	})
	if sess.InterruptionReason != session.ReasonCrash || sess.CurrentTaskID != "task_p2_code_002" || sess.CurrentPhase != 2 {
		t.Fatalf("interrupted session %+v", sess)
	}
	waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning && a.PID != m.PID })

	// Resume.
	var child string
	if via == "api" {
		var res session.ResumeResult
		apiInto(t, "POST", base+"/projects/"+v.ID+"/sessions/"+v.SessionID+"/resume", nil, 201, &res)
		child = res.Session.ID
		if res.Session.ParentSessionID != v.SessionID {
			t.Fatalf("child %+v", res.Session)
		}
	} else {
		out, code := runCLI(t, "session", "resume", v.SessionID, "--data", data)
		if code != 0 || !strings.Contains(out, "resumed as sess_") {
			t.Fatalf("session resume: %d %s", code, out)
		}
		child = strings.Fields(out[strings.Index(out, "resumed as ")+len("resumed as "):])[0]
	}
	if code, body := api(t, "POST", base+"/projects/"+v.ID+"/sessions/"+v.SessionID+"/resume", nil); code != 409 || !strings.Contains(string(body), `"code":"conflict"`) {
		t.Fatalf("second resume: %d %s", code, body)
	}
	wait.For(t, 30*time.Second, "the child session completed", func() bool {
		p := project(t, base, v.ID)
		return p.SessionID == child && p.Status == session.SessionCompleted
	})
	p := project(t, base, v.ID)
	if p.Progress.Completed != 6 || len(p.Sessions) != 2 || p.Sessions[0].Status != session.SessionResumed {
		t.Fatalf("after the resume: %+v", p)
	}

	// The ledger: every task's non-idempotent append happened exactly once.
	counts := ledger(t, data, v.ID)
	for _, x := range p.Tasks {
		if counts[x.Name] != 1 {
			t.Errorf("task %s (%s) appended %d times; ledger %v", x.ID, x.Name, counts[x.Name], counts)
		}
	}
	// Completed tasks before the kill stayed with the first session.
	if st := taskStatus(p, "task_p1_concept_001"); st.SessionID != v.SessionID {
		t.Errorf("task_p1_concept_001 moved to session %s", st.SessionID)
	}

	// The child session keeps its resume context (every task of it carried
	// it): approvals and approaches.
	var sv session.SessionView
	apiInto(t, "GET", base+"/projects/"+v.ID+"/sessions/"+child, nil, 200, &sv)
	var rc session.ResumeContext
	if err := json.Unmarshal(sv.ResumeContext, &rc); err != nil {
		t.Fatalf("resume_context: %v: %s", err, sv.ResumeContext)
	}
	if rc.ParentSessionID != v.SessionID || rc.InterruptionReason != session.ReasonCrash ||
		len(rc.Approvals) != 1 || rc.Approvals[0].Status != session.ApprovalApproved ||
		len(rc.VerifiedApproaches) != 2 || len(rc.FailedApproaches) != 1 || len(rc.NextApproaches) != 1 ||
		rc.CurrentTask == nil || rc.CurrentTask.TaskID != "task_p2_code_002" || rc.CurrentPhase != 2 {
		t.Fatalf("resume context %+v", rc)
	}
	var aps2 session.ApproachesView
	apiInto(t, "GET", base+"/projects/"+v.ID+"/approaches", nil, 200, &aps2)
	// Verified: the one recorded by the tool, and the approval of the
	// review (recorded by the dispatcher).
	if len(aps2.Verified) != 2 || len(aps2.Failed) != 1 || len(aps2.Untried) != 1 {
		t.Fatalf("approaches %+v", aps2)
	}
	if via == "cli" {
		out, code := runCLI(t, "session", "list", v.ID, "--json", "--data", data)
		var ss []session.Session
		if code != 0 || json.Unmarshal([]byte(out), &ss) != nil || len(ss) != 2 {
			t.Fatalf("session list --json: %d %s", code, out)
		}
		out, code = runCLI(t, "project", "show", v.ID, "--data", data)
		if code != 0 || !strings.Contains(out, "6/6 tasks completed") {
			t.Fatalf("project show: %d %s", code, out)
		}
	}
	c.waitLog("interrupted (crash)", time.Second)
}

// TestSessionApprovals: a decision through the API or the CLI releases the
// waiting task; a revision runs it again with the feedback; a pending
// approval survives a SIGKILL of the master and of the whole daemon.
func TestSessionApprovals(t *testing.T) {
	data := dataDir(t)
	c, base := sessionDaemon(t, data)
	plan := map[string]any{"name": "gated", "tasks": []any{
		map[string]any{"phase": 1, "type": "draft", "name": "draft", "input": "write the draft", "approval": true},
		ledgerTask(1, "publish", "publish", []any{0}),
		map[string]any{"phase": 2, "type": "final", "name": "final", "input": "final check", "approval": true},
	}}
	var v session.ProjectView
	apiInto(t, "POST", base+"/projects", plan, 201, &v)
	pending := func() session.Approval {
		t.Helper()
		var aps []session.Approval
		wait.For(t, 20*time.Second, "a pending approval", func() bool {
			apiInto(t, "GET", base+"/projects/"+v.ID+"/approvals?status=pending", nil, 200, &aps)
			return len(aps) == 1
		})
		return aps[0]
	}
	a := pending()

	// SIGKILL of the master while the approval is pending: nothing is lost.
	m, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, data, "master", 20*time.Second, func(x control.AgentInfo) bool { return x.State == control.StateRunning && x.PID != m.PID })
	if st := taskStatus(project(t, base, v.ID), "task_p1_draft_001"); st.State != session.WaitingForApproval {
		t.Fatalf("after the kill: %+v", st)
	}
	// A revision through the CLI: the draft runs again with the feedback.
	out, code := runCLI(t, "approval", "revise", fmt.Sprint(a.ID), "--feedback", "add a summary", "--data", data)
	if code != 0 || !strings.Contains(out, "revision_requested") {
		t.Fatalf("approval revise: %d %s", code, out)
	}
	if out, code := runCLI(t, "approval", "approve", fmt.Sprint(a.ID), "--data", data); code == 0 || !strings.Contains(out, "conflict") {
		t.Fatalf("deciding twice: %d %s", code, out)
	}
	a2 := pending()
	d := taskStatus(project(t, base, v.ID), "task_p1_draft_001")
	if a2.Attempt != 1 || a2.ID == a.ID || d.Attempt != 1 || !strings.Contains(string(d.Result), "revision feedback: add a summary") {
		t.Fatalf("revised run: approval %+v task %+v", a2, d)
	}
	out, code = runCLI(t, "approval", "list", v.ID, "--json", "--data", data)
	var listed []session.Approval
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 2 || listed[0].Status != session.ApprovalRevision ||
		len(listed[0].RevisionHistory) != 1 || listed[0].RevisionHistory[0].Feedback != "add a summary" {
		t.Fatalf("approval list --json: %d %s", code, out)
	}
	apiInto(t, "POST", fmt.Sprintf("%s/approvals/%d", base, a2.ID), map[string]string{"decision": "approve"}, 200, nil)
	a3 := pending() // the final gate of phase 2
	if a3.TaskID != "task_p2_final_001" || ledger(t, data, v.ID)["publish"] != 1 {
		t.Fatalf("after the approval: %+v, ledger %v", a3, ledger(t, data, v.ID))
	}

	// SIGKILL of the daemon while it is pending: the next boot reads the
	// journal (no clean stop, same machine boot: crash), marks the session
	// interrupted, and the approval is still there to decide.
	c.kill()
	c2, base2 := sessionDaemon(t, data)
	c2.waitLog(`"previous_run":"crash"`, 5*time.Second)
	if st := daemonStatus(t, data); st.PreviousRun != "crash" {
		t.Fatalf("status previous_run %q", st.PreviousRun)
	}
	var ss []session.Session
	apiInto(t, "GET", base2+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
	if len(ss) != 1 || ss[0].Status != session.SessionInterrupted || ss[0].InterruptionReason != session.ReasonCrash {
		t.Fatalf("after the daemon's kill: %+v", ss)
	}
	base = base2
	apiInto(t, "POST", fmt.Sprintf("%s/approvals/%d", base, a3.ID), map[string]string{"decision": "reject", "feedback": "not now"}, 200, nil)
	p := project(t, base, v.ID)
	if st := taskStatus(p, "task_p2_final_001"); st.Status != session.TaskFailed || !strings.Contains(st.Error, "not now") {
		t.Fatalf("rejected task %+v", st)
	}
	// A clean stop is recorded as such.
	if err := c2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := c2.wait(30 * time.Second); code != 0 || err != nil {
		t.Fatalf("clean stop: %d %v", code, err)
	}
	c3, _ := sessionDaemon(t, data)
	c3.waitLog(`"previous_run":"clean"`, 5*time.Second)
}

// TestSessionFiles: sessions.db deleted is rebuilt from the JSON files; a
// damaged JSON file loses to the database; both are logged.
func TestSessionFiles(t *testing.T) {
	data := dataDir(t)
	c, base := sessionDaemon(t, data)
	plan := map[string]any{"name": "files", "tasks": []any{
		ledgerTask(1, "a", "a", nil),
		map[string]any{"phase": 1, "type": "b", "input": "gate", "depends_on": []any{0}, "approval": true},
		ledgerTask(2, "c", "c", nil),
	}}
	var v session.ProjectView
	apiInto(t, "POST", base+"/projects", plan, 201, &v)
	wait.For(t, 20*time.Second, "the gate", func() bool {
		return taskStatus(project(t, base, v.ID), "task_p1_b_001").State == session.WaitingForApproval
	})
	// The files as the seed lays them out, 0600 in 0700 directories.
	sdir := filepath.Join(data, "projects", v.ID, "sessions", v.SessionID)
	for _, f := range []string{filepath.Join(data, "projects", v.ID, "project.json"), filepath.Join(sdir, "state_checkpoint.json"),
		filepath.Join(sdir, "approaches.json"), filepath.Join(sdir, "remaining_tasks.json"), filepath.Join(data, "sessions.db")} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	for _, d := range []string{sdir, filepath.Join(sdir, "artifacts"), filepath.Join(data, "projects", v.ID)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	cp, err := session.DecodeCheckpoint(mustReadFile(t, filepath.Join(sdir, "state_checkpoint.json")))
	if err != nil || cp.CurrentState.ActiveTask == nil || cp.CurrentState.ActiveTask.TaskID != "task_p1_b_001" ||
		len(cp.CompletedTasks) != 1 || len(cp.PendingTasks) != 1 || len(cp.RemainingTasks) != 1 {
		t.Fatalf("checkpoint %+v %v", cp, err)
	}
	// The periodic checkpoint (300ms here) rewrites it while nothing else happens.
	wait.For(t, 10*time.Second, "a periodic checkpoint", func() bool {
		cp2, err := session.DecodeCheckpoint(mustReadFile(t, filepath.Join(sdir, "state_checkpoint.json")))
		return err == nil && cp2.Timestamp.After(cp.Timestamp)
	})
	before := project(t, base, v.ID)

	// sessions.db deleted while the daemon is down.
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.wait(30 * time.Second)
	for _, f := range []string{"sessions.db", "sessions.db-wal", "sessions.db-shm"} {
		os.Remove(filepath.Join(data, f))
	}
	c, base = sessionDaemon(t, data)
	c.waitLog("sessions.db was missing: rebuilt 1 project(s) from the JSON files", time.Second)
	after := project(t, base, v.ID)
	if len(after.Tasks) != 3 || len(after.Sessions) != 1 || after.Progress.Completed != before.Progress.Completed ||
		after.Sessions[0].Status != session.SessionInterrupted || after.Sessions[0].InterruptionReason != session.ReasonShutdown {
		t.Fatalf("rebuilt: %+v\nbefore: %+v", after, before)
	}
	for i := range after.Tasks {
		if after.Tasks[i].ID != before.Tasks[i].ID || after.Tasks[i].Status != before.Tasks[i].Status {
			t.Errorf("task %d: %+v, before %+v", i, after.Tasks[i], before.Tasks[i])
		}
	}
	var aps []session.Approval
	apiInto(t, "GET", base+"/projects/"+v.ID+"/approvals", nil, 200, &aps)
	if len(aps) != 1 || aps[0].Status != session.ApprovalPending {
		t.Fatalf("rebuilt approvals %+v", aps)
	}

	// A damaged state_checkpoint.json: the database wins at the next boot.
	c.kill()
	cpPath := filepath.Join(sdir, "state_checkpoint.json")
	if err := os.WriteFile(cpPath, []byte(`{"schema_version": "1.0", "project_id": "proj_`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, base = sessionDaemon(t, data)
	c.waitLog(cpPath+" is damaged: the database wins", time.Second)
	if _, err := session.DecodeCheckpoint(mustReadFile(t, cpPath)); err != nil {
		t.Fatalf("not rewritten: %v", err)
	}

	// Bad ids and bodies get 400, unknown ones 404, all as one line of JSON.
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/projects/proj_bad", "", 400},
		{"GET", "/projects/proj_20240115_zzzzzz", "", 404},
		{"GET", "/projects/" + v.ID + "/sessions/sess_2024_x", "", 400},
		{"POST", "/projects/" + v.ID + "/sessions/sess_20240115143000_zzzzzz/resume", "", 404},
		{"POST", "/projects", `{"name": "x", "tasks": [{"phase": 1, "type": "../x"}]}`, 400},
		{"POST", "/projects", `{"name": "x"`, 400},
		{"POST", "/approvals/abc", `{"decision": "approve"}`, 400},
		{"POST", "/approvals/1", `{"decision": "perhaps"}`, 400},
		{"DELETE", "/projects", "", 405},
	} {
		code, body := api(t, tc.method, base+tc.path, []byte(tc.body))
		var e map[string]string
		if code != tc.want || json.Unmarshal(body, &e) != nil || e["code"] == "" || bytes.Count(bytes.TrimSpace(body), []byte("\n")) != 0 {
			t.Errorf("%s %s: %d %s, want %d and one line of JSON", tc.method, tc.path, code, body, tc.want)
		}
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
