package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
)

// modelMaster writes a master template driven by the model server srv,
// with unknown_outcome "approval", into DATA/templates, and returns the
// daemon's configuration naming it.
func modelMaster(t *testing.T, data string, srv *llmtest.Server) string {
	t.Helper()
	tmpl := map[string]any{
		"name": "modelmaster", "version": "1.0.0", "role": "master",
		"brain":           map[string]any{"provider": "openai", "base_url": srv.BaseURL(), "model": "test-model", "timeout_ms": 10000},
		"system_prompt":   "You are the master agent.",
		"tools":           []string{"file_append", "file_read", "sleep_ms", "approval_request", "approach_record", "task_update"},
		"context_budget":  map[string]any{"max_messages": 40},
		"unknown_outcome": "approval",
		"limits":          map[string]any{"max_steps": 6},
	}
	dir := filepath.Join(data, "templates")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(tmpl)
	if err := os.WriteFile(filepath.Join(dir, "modelmaster.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return daemonConfig(t, data, "master:\n  template: modelmaster\nsessions:\n  checkpoint_interval: 300ms\n")
}

// TestUnknownOutcomeApprovalSession: a model-driven master with
// unknown_outcome "approval" is SIGKILLed while file_append of a session's
// task runs (blocked on a FIFO, so that the kill surely lands inside it).
// The restarted master does not run the tool again and does not ask the
// model again: it raises an approval (checkpoint_type unknown_outcome) that
// `openstarry approval list` shows, and the task waits. Approved, the model's
// next request carries the operator's decision and feedback as the tool's
// result, the task finishes, and a resumed session completes the plan.
// Rejected, the task fails with the operator's words.
func TestUnknownOutcomeApprovalSession(t *testing.T) {
	for _, decision := range []string{"approve", "reject"} {
		t.Run(decision, func(t *testing.T) { testUnknownOutcomeApproval(t, decision) })
	}
}

func testUnknownOutcomeApproval(t *testing.T, decision string) {
	data := dataDir(t)
	var (
		mu    sync.Mutex
		first int
	)
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		if isSummary(req) {
			return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"the payment waits for the operator"}}]}`}
		}
		if req.Body.ToolResults() == 0 {
			mu.Lock()
			first++
			mu.Unlock()
			// The plan's artifacts directory gets a FIFO named like the
			// file to append to: the append blocks opening it.
			dirs, _ := filepath.Glob(filepath.Join(data, "projects", "*", "sessions", "*", "artifacts"))
			for _, d := range dirs {
				_ = syscall.Mkfifo(filepath.Join(d, "ledger.txt"), 0o600)
			}
			return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"call_append","type":"function","function":{"name":"file_append","arguments":"{\"file\":\"ledger.txt\",\"line\":\"paid\"}"}},` +
				`{"id":"call_after","type":"function","function":{"name":"sleep_ms","arguments":"{\"ms\":1}"}}]}}]}`}
		}
		return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"checked with the operator; done"}}]}`}
	})
	c := startDaemon(t, modelMaster(t, data, srv))
	base := daemonStatus(t, data).HTTP
	var v session.ProjectView
	apiInto(t, "POST", base+"/projects", map[string]any{"name": "pay", "tasks": []any{
		map[string]any{"phase": 1, "type": "pay", "name": "pay once", "input": "append paid to ledger.txt"}}}, 201, &v)
	taskID := v.Tasks[0].ID
	var agentTask string // the id the master runs it under

	// Kill the master while file_append is inside its pending action.
	wait.For(t, 20*time.Second, "file_append running (pending_action saved)", func() bool {
		var snap struct {
			Pending *struct {
				Tool string `json:"tool"`
			} `json:"pending_action"`
		}
		code, body := api(t, "GET", base+"/agents/master/snapshot", nil)
		return code == 200 && json.Unmarshal(body, &snap) == nil && snap.Pending != nil && snap.Pending.Tool == "file_append"
	})
	m, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning && a.PID != m.PID })

	// The operator sees the approval; the task waits for it.
	var ap session.Approval
	wait.For(t, 20*time.Second, "the unknown outcome's approval", func() bool {
		out, code := runCLI(t, "approval", "list", v.ID, "--json", "--data", data)
		var aps []session.Approval
		if code != 0 || json.Unmarshal([]byte(out), &aps) != nil || len(aps) != 1 {
			return false
		}
		ap = aps[0]
		return true
	})
	var instr bytes.Buffer
	_ = json.Compact(&instr, ap.WorkerInstructions)
	ap.WorkerInstructions = instr.Bytes()
	if ap.CheckpointType != session.CheckpointUnknownOutcome || ap.Status != session.ApprovalPending || ap.TaskID != taskID ||
		ap.LeaderID != "master" || !strings.Contains(ap.InstructionContent, "file_append") || !strings.Contains(string(ap.WorkerInstructions), `"line":"paid"`) {
		t.Fatalf("approval %+v", ap)
	}
	if st := taskStatus(project(t, base, v.ID), taskID); st.State != session.WaitingForApproval {
		t.Fatalf("plan task while waiting: %+v", st)
	}
	agentTask = taskStatus(project(t, base, v.ID), taskID).AgentTaskID
	if code, st, err := getTask(base, "master", agentTask); err != nil || code != 200 || st.Status != "running" {
		t.Fatalf("the master's task while waiting: %d %+v %v", code, st, err)
	}
	out, code := runCLI(t, "approval", decision, fmt.Sprint(ap.ID), "--feedback", "checked the ledger: nothing was written", "--by", "ops", "--data", data)
	if code != 0 {
		t.Fatalf("approval %s: %d %s", decision, code, out)
	}
	st := waitTask(t, base, "master", agentTask)
	mu.Lock()
	asked := first
	mu.Unlock()
	if asked != 1 {
		t.Fatalf("the model was asked the task's first question %d times, want 1", asked)
	}
	// The FIFO is still there and empty of readers: the append never ran
	// a second time (a second open would have blocked the task forever).
	if decision == "reject" {
		if st.Status != "failed" || !strings.Contains(st.Error, "rejected") || !strings.Contains(st.Error, "checked the ledger") {
			t.Fatalf("rejected: %+v", st)
		}
		if n := len(taskRequests(srv)); n != 1 {
			t.Fatalf("the model was asked %d times after a rejection, want 1", n)
		}
		return
	}
	if st.Status != "done" || string(st.Output) != `"checked with the operator; done"` {
		t.Fatalf("approved: %+v\n%s", st, c.logs())
	}
	reqs := taskRequests(srv)
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2", len(reqs))
	}
	var decided, notRun bool
	for _, msg := range reqs[1].Body.Messages {
		if msg.Role != "tool" || msg.Content == nil {
			continue
		}
		switch msg.ToolCallID {
		case "call_append":
			decided = strings.Contains(*msg.Content, `"operator_decision":"approved"`) && strings.Contains(*msg.Content, "checked the ledger: nothing was written")
		case "call_after":
			notRun = strings.Contains(*msg.Content, "not run")
		}
	}
	if !decided || !notRun {
		t.Fatalf("the model's second request: %s", reqs[1].Raw)
	}

	// The session was interrupted by the kill; resumed, it completes
	// with the agent's result, the task not run again.
	var ss []session.Session
	apiInto(t, "GET", base+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
	if len(ss) != 1 || ss[0].Status != session.SessionInterrupted {
		t.Fatalf("sessions %+v", ss)
	}
	if out, code := runCLI(t, "session", "resume", v.SessionID, "--data", data); code != 0 {
		t.Fatalf("session resume: %d %s", code, out)
	}
	wait.For(t, 20*time.Second, "the plan completed", func() bool {
		p := project(t, base, v.ID)
		return p.Status == session.SessionCompleted && taskStatus(p, taskID).Status == session.TaskCompleted
	})
	if n := len(taskRequests(srv)); n != 2 {
		t.Fatalf("after the resume the model was asked %d times, want 2", n)
	}
}

// TestResumeContextReachesModel: a model-driven master records a failed
// approach, then is SIGKILLed inside a task; the session is interrupted and
// resumed, and the next task the resumed session hands the master, and the
// one after it, which the plan assigns to a worker, reach the model with
// the session's resume context (the parent session, why it stopped, the
// failed approach, the task in progress) in a system message before the
// task's input.
func TestResumeContextReachesModel(t *testing.T) {
	data := dataDir(t)
	var (
		mu      sync.Mutex
		started = map[string]bool{}
	)
	answer := func(content string) llmtest.Answer {
		return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"` + content + `"}}]}`}
	}
	calls := func(call string) llmtest.Answer {
		return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[` + call + `]}}]}`}
	}
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		var input string
		for _, m := range req.Body.Messages {
			if m.Role == "user" && m.Content != nil {
				input = *m.Content
			}
		}
		mu.Lock()
		started[input] = true
		mu.Unlock()
		switch {
		case input == "task one" && req.Body.ToolResults() == 0:
			return calls(`{"id":"c1","type":"function","function":{"name":"approach_record","arguments":"{\"kind\":\"failed\",\"category\":\"jump\",\"description\":\"velocity only\",\"failure_reason\":\"double jump\"}"}}`)
		case input == "task two" && req.Body.ToolResults() == 0:
			return calls(`{"id":"c2","type":"function","function":{"name":"sleep_ms","arguments":"{\"ms\":3000}"}}`)
		}
		return answer(strings.ReplaceAll(input, " ", "_") + "_done")
	})
	cfg := modelMaster(t, data, srv)
	// A worker on the same model, to which the plan assigns its last task:
	// the resume context reaches it too (issue 29, item 9).
	tmplDir := filepath.Join(data, "templates")
	var mt map[string]any
	if err := json.Unmarshal(mustReadFile(t, filepath.Join(tmplDir, "modelmaster.json")), &mt); err != nil {
		t.Fatal(err)
	}
	mt["workers"] = []string{"worker"}
	mt["tools"] = append(mt["tools"].([]any), "agent_manager")
	wt := map[string]any{"name": "worker", "version": "1.0.0", "role": "worker", "brain": mt["brain"],
		"system_prompt": "You are a worker.", "tools": []string{"sleep_ms"}, "context_budget": map[string]any{"max_messages": 20}}
	for name, tmpl := range map[string]any{"modelmaster": mt, "worker": wt} {
		raw, _ := json.Marshal(tmpl)
		if err := os.WriteFile(filepath.Join(tmplDir, name+".json"), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := startDaemon(t, cfg)
	base := daemonStatus(t, data).HTTP
	var v session.ProjectView
	apiInto(t, "POST", base+"/projects", map[string]any{"name": "game", "tasks": []any{
		map[string]any{"phase": 1, "type": "one", "input": "task one"},
		map[string]any{"phase": 1, "type": "two", "input": "task two", "depends_on": []any{0}},
		map[string]any{"phase": 1, "type": "three", "input": "task three", "depends_on": []any{1}},
		map[string]any{"phase": 1, "type": "four", "input": "task four", "depends_on": []any{2}, "assigned_to": "w1"},
	}}, 201, &v)
	two := v.Tasks[1].ID
	wait.For(t, 20*time.Second, "the master inside task two's sleep", func() bool {
		code, st, err := getTask(base, "master", taskStatus(project(t, base, v.ID), two).AgentTaskID)
		mu.Lock()
		asked := started["task two"]
		mu.Unlock()
		return asked && err == nil && code == 200 && st.Status == "running"
	})
	m, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the session interrupted", func() bool {
		var ss []session.Session
		apiInto(t, "GET", base+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
		return len(ss) == 1 && ss[0].Status == session.SessionInterrupted
	})
	waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning && a.PID != m.PID })
	mu.Lock()
	if started["task three"] {
		t.Fatal("task three ran before the resume")
	}
	mu.Unlock()
	var res session.ResumeResult
	apiInto(t, "POST", base+"/projects/"+v.ID+"/sessions/"+v.SessionID+"/resume", nil, 201, &res)
	wait.For(t, 30*time.Second, "the resumed session completed", func() bool {
		p := project(t, base, v.ID)
		return p.SessionID == res.Session.ID && p.Status == session.SessionCompleted
	})

	for _, input := range []string{"task three", "task four"} {
		checkResumeContext(t, srv, input, v.SessionID, two, c.logs)
	}
}

// checkResumeContext checks that the model's request for the task of
// input carried the resume context of the session that resumed parent.
func checkResumeContext(t *testing.T, srv *llmtest.Server, input, parent, two string, logs func() string) {
	t.Helper()
	var three *llmtest.Request
	for _, r := range srv.Requests() {
		if n := len(r.Body.Messages); n > 0 && r.Body.Messages[n-1].Content != nil && *r.Body.Messages[n-1].Content == input {
			r := r
			three = &r
		}
	}
	if three == nil {
		t.Fatalf("%s never reached the model\n%s", input, logs())
	}
	var resume string
	at, task := -1, len(three.Body.Messages)-1
	for i, msg := range three.Body.Messages {
		if msg.Role == "system" && msg.Content != nil && strings.Contains(*msg.Content, "session continuity") {
			resume, at = *msg.Content, i
		}
	}
	for _, want := range []string{`"parent_session_id":"` + parent + `"`, `"interruption_reason":"crash"`, "velocity only", "double jump", two} {
		if !strings.Contains(resume, want) {
			t.Fatalf("the resume context the model received for %s lacks %s:\n%s", input, want, three.Raw)
		}
	}
	if at < 0 || at > task || len(resume) > 9<<10 {
		t.Fatalf("resume context at message %d of %d, %d bytes", at, task+1, len(resume))
	}
}

// isSummary reports whether a model request is session continuity's
// session_summary task (its system message asks for the summary).
func isSummary(req llmtest.Request) bool {
	for _, m := range req.Body.Messages {
		if m.Role == "system" && m.Content != nil && strings.Contains(*m.Content, "context summary") {
			return true
		}
	}
	return false
}

// taskRequests are the model's requests for plan tasks: all but the
// summaries.
func taskRequests(srv *llmtest.Server) []llmtest.Request {
	var out []llmtest.Request
	for _, r := range srv.Requests() {
		if !isSummary(r) {
			out = append(out, r)
		}
	}
	return out
}
