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

// TestResumeContextInRequest: once a resumed session's context was handed
// to the agent, every task of that session carries it to the model as a
// system message before the window and the task's input, bounded in size;
// a task of another session or of none does not.
func TestResumeContextInRequest(t *testing.T) {
	const (
		proj   = "proj_20260101_abc123"
		child  = "sess_20260101120000_abc123"
		other  = "sess_20260101130000_zzz999"
		parent = "sess_20260101110000_par001"
	)
	answer := llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}]}`}
	srv := llmtest.New(t, answer, answer, answer, answer)
	r := newRig(t, template(srv.BaseURL()))
	rc := `{"parent_session_id":"` + parent + `","interruption_reason":"crash","previous_state":"1 of 3 tasks completed",` +
		`"current_task":{"task_id":"task_p1_code_002"},"failed_approaches":[{"id":"approach_f1","description":"velocity only","failure_reason":"double jump"}],` +
		`"verified_approaches":[{"id":"approach_1","description":"three ideas from one prompt"}],"remaining_tasks":[{"task_id":"task_p1_test_001"}]}`
	r.submitTask(&agent.Task{TaskID: child + ".resume", Type: agent.TaskTypeSessionResume, Input: json.RawMessage(rc), ProjectID: proj, SessionID: child})
	r.submitTask(&agent.Task{TaskID: "in_child", Input: json.RawMessage(`"continue the plan"`), ProjectID: proj, SessionID: child})
	r.submitTask(&agent.Task{TaskID: "in_other", Input: json.RawMessage(`"another session"`), ProjectID: proj, SessionID: other})
	r.submitTask(&agent.Task{TaskID: "no_session", Input: json.RawMessage(`"no session"`)})
	for _, id := range []string{child + ".resume", "in_child", "in_other", "no_session"} {
		if st := r.wait(id); st.Status != agent.ResultDone {
			t.Fatalf("%s: %+v", id, st)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (the resume task asks no model)", len(reqs))
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
	content, at, task := resumeMsg(0)
	for _, want := range []string{parent, `"interruption_reason":"crash"`, "velocity only", "double jump", "three ideas from one prompt", "task_p1_code_002", "task_p1_test_001"} {
		if !strings.Contains(content, want) {
			t.Fatalf("the resume context lacks %q: %s", want, reqs[0].Raw)
		}
	}
	if at < 1 || at > task || *reqs[0].Body.Messages[len(reqs[0].Body.Messages)-1].Content != "continue the plan" {
		t.Fatalf("resume context at message %d, task at %d: %s", at, task, reqs[0].Raw)
	}
	for i := 1; i < 3; i++ {
		if c, _, _ := resumeMsg(i); c != "" {
			t.Fatalf("request %d carries a resume context: %s", i, reqs[i].Raw)
		}
	}

	// A context far larger than a model's window is clipped.
	srv2 := llmtest.New(t, answer)
	r2 := newRig(t, template(srv2.BaseURL()))
	big := `{"parent_session_id":"` + parent + `","previous_state":"` + strings.Repeat("x", 100<<10) + `"}`
	r2.submitTask(&agent.Task{TaskID: "r", Type: agent.TaskTypeSessionResume, Input: json.RawMessage(big), ProjectID: proj, SessionID: child})
	r2.submitTask(&agent.Task{TaskID: "t", Input: json.RawMessage(`"go on"`), ProjectID: proj, SessionID: child})
	r2.wait("t")
	reqs = srv2.Requests()
	var found bool
	for _, m := range reqs[0].Body.Messages {
		if m.Role == "system" && m.Content != nil && strings.Contains(*m.Content, parent) {
			found = true
			if n := len(*m.Content); n > 8<<10+64 || !strings.Contains(*m.Content, "bytes cut]") {
				t.Fatalf("a resume context of 100 KiB reached the model as %d bytes", n)
			}
		}
	}
	if !found {
		t.Fatalf("no resume context: %s", reqs[0].Raw)
	}
}
