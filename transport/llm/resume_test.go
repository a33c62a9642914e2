package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
)

func (r *rig) submitTask(task *agent.Task) {
	r.t.Helper()
	ev, err := agent.TaskEvent(task, "test", time.Now().UnixMilli())
	if err != nil {
		r.t.Fatal(err)
	}
	if res := r.rt.Submit(context.Background(), ev); res.Err != nil {
		r.t.Fatal(res.Err)
	}
}

// TestResumeContextInRequest: every task of a resumed session carries its
// session's resume context (session continuity sends it with each), and
// the model gets it as a system message before the window and the task's
// input. Two resumed sessions on one agent each get their own; a task of
// no session, or outside the plan: namespace, gets none; a context larger
// than 8 KiB is cut so that the model still reads valid JSON.
func TestResumeContextInRequest(t *testing.T) {
	const (
		proj   = "proj_20260101_abc123"
		child  = "sess_20260101120000_abc123"
		other  = "sess_20260101130000_zzz999"
		parent = "sess_20260101110000_par001"
	)
	answer := llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}]}`}
	srv := llmtest.New(t, answer, answer, answer, answer, answer)
	r := newRig(t, template(srv.BaseURL()))
	rc := `{"parent_session_id":"` + parent + `","interruption_reason":"crash","previous_state":"1 of 3 tasks completed",` +
		`"current_task":{"task_id":"task_p1_code_002"},"failed_approaches":[{"id":"approach_f1","description":"velocity only","failure_reason":"double jump"}],` +
		`"verified_approaches":[{"id":"approach_1","description":"three ideas from one prompt"}],"remaining_tasks":[{"task_id":"task_p1_test_001"}]}`
	rc2 := `{"parent_session_id":"sess_20260101100000_oth002","interruption_reason":"error"}`
	plan := func(sess, task string) string { return "plan:" + proj + ":" + sess + ":" + task + ":0" }
	tasks := []*agent.Task{
		{TaskID: plan(child, "task_p1_code_002"), Input: json.RawMessage(`"continue the plan"`), ProjectID: proj, SessionID: child, ResumeContext: json.RawMessage(rc)},
		{TaskID: plan(other, "task_p1_x_001"), Input: json.RawMessage(`"another session"`), ProjectID: proj, SessionID: other, ResumeContext: json.RawMessage(rc2)},
		{TaskID: plan(child, "task_p1_test_001"), Input: json.RawMessage(`"the next task"`), ProjectID: proj, SessionID: child, ResumeContext: json.RawMessage(rc)},
		{TaskID: "not_a_plan_task", Input: json.RawMessage(`"sent by anyone"`), ProjectID: proj, SessionID: child, ResumeContext: json.RawMessage(rc)},
		{TaskID: "no_session", Input: json.RawMessage(`"no session"`)},
	}
	for _, task := range tasks {
		r.submitTask(task)
	}
	for _, task := range tasks {
		if st := r.wait(task.TaskID); st.Status != agent.ResultDone {
			t.Fatalf("%s: %+v", task.TaskID, st)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != len(tasks) {
		t.Fatalf("%d requests, want %d", len(reqs), len(tasks))
	}
	resumeMsg := func(i int) (string, int, int) {
		at, task := -1, -1
		var content string
		for j, m := range reqs[i].Body.Messages {
			if m.Content == nil {
				continue
			}
			if m.Role == "system" && strings.Contains(*m.Content, "session continuity") {
				at, content = j, *m.Content
			}
			if m.Role == "user" {
				task = j
			}
		}
		return content, at, task
	}
	for _, i := range []int{0, 2} {
		content, at, task := resumeMsg(i)
		for _, want := range []string{parent, `"interruption_reason":"crash"`, "velocity only", "double jump", "three ideas from one prompt", "task_p1_code_002", "task_p1_test_001"} {
			if !strings.Contains(content, want) {
				t.Fatalf("request %d: the resume context lacks %q: %s", i, want, reqs[i].Raw)
			}
		}
		var input string
		_ = json.Unmarshal(tasks[i].Input, &input)
		if at < 1 || at > task || *reqs[i].Body.Messages[len(reqs[i].Body.Messages)-1].Content != input {
			t.Fatalf("request %d: resume context at message %d, task at %d: %s", i, at, task, reqs[i].Raw)
		}
	}
	if c, _, _ := resumeMsg(1); !strings.Contains(c, "sess_20260101100000_oth002") || strings.Contains(c, parent) {
		t.Fatalf("the other session's task: %s", reqs[1].Raw)
	}
	for i := 3; i < 5; i++ {
		if c, _, _ := resumeMsg(i); c != "" {
			t.Fatalf("request %d carries a resume context: %s", i, reqs[i].Raw)
		}
	}

	// A context far larger than a model's window is cut, and stays JSON.
	srv2 := llmtest.New(t, answer)
	r2 := newRig(t, template(srv2.BaseURL()))
	big := `{"parent_session_id":"` + parent + `","previous_state":"` + strings.Repeat("x", 100<<10) + `","remaining_tasks":[` +
		strings.TrimSuffix(strings.Repeat(`{"task_id":"task_p1_a_001","status":"pending"},`, 2000), ",") + `]}`
	id := plan(child, "task_p1_a_001")
	r2.submitTask(&agent.Task{TaskID: id, Input: json.RawMessage(`"go on"`), ProjectID: proj, SessionID: child, ResumeContext: json.RawMessage(big)})
	r2.wait(id)
	reqs = srv2.Requests()
	var found bool
	for _, m := range reqs[0].Body.Messages {
		if m.Role == "system" && m.Content != nil && strings.Contains(*m.Content, parent) {
			found = true
			c := *m.Content
			body := c[strings.Index(c, "\n")+1:]
			var v map[string]any
			if n := len(c); n > 8<<10 || json.Unmarshal([]byte(body), &v) != nil || v["truncated"] != true || v["parent_session_id"] != parent {
				t.Fatalf("a resume context of %d KiB reached the model as %d bytes, valid JSON %v: %.300s", len(big)>>10, n, json.Valid([]byte(body)), body)
			}
		}
	}
	if !found {
		t.Fatalf("no resume context: %s", reqs[0].Raw)
	}
}
