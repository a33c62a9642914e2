//go:build unix

package main

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestStatusRunningTask: while the master runs a long task, `openstarry
// status`, GET /status and the agent's GET /agents/{id}/current and
// /tasks/{id} show the task in hand: its id, the step and tool it is in, how
// long it has run and its last progress. Idle again, nothing is shown.
func TestStatusRunningTask(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	task := map[string]any{"task_id": "long-1", "input": map[string]any{"call": []any{
		map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 4000}}}}}
	if code, body := api(t, "POST", base+"/agents/master/tasks", task); code != 202 {
		t.Fatalf("POST: %d %s", code, body)
	}
	var cur *control.CurrentTask
	wait.For(t, 20*time.Second, "GET /status showing the task in hand", func() bool {
		var st control.Status
		code, body := api(t, "GET", base+"/status", nil)
		if code != 200 || json.Unmarshal(body, &st) != nil {
			return false
		}
		a, _ := agentInfo(&st, "master")
		cur = a.Current
		return cur != nil && cur.Tool == "sleep_ms"
	})
	if cur.TaskID != "long-1" || cur.Step != 0 || cur.Phase != "tool:sleep_ms" || cur.Started.IsZero() || cur.Updated.IsZero() {
		t.Fatalf("current task %+v", cur)
	}
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !regexp.MustCompile(`(?m)^RUNNING\s+TASK\s+STEP\s+DOING\s+ELAPSED\s+LAST PROGRESS\n`+
		`master\s+long-1\s+1\s+tool sleep_ms\s+\S+\s+\S+ ago$`).MatchString(out) {
		t.Fatalf("status (%d) does not show the running task:\n%s", code, out)
	}
	code, body := api(t, "GET", base+"/agents/master/tasks/long-1", nil)
	var ts struct {
		Status  string
		Current *control.CurrentTask
	}
	if code != 200 || json.Unmarshal(body, &ts) != nil || ts.Status != "running" || ts.Current == nil || ts.Current.Tool != "sleep_ms" {
		t.Fatalf("GET the running task: %d %s", code, body)
	}
	waitTask(t, base, "master", "long-1")
	if code, body := api(t, "GET", base+"/agents/master/current", nil); code != 200 || string(body) != "null\n" {
		t.Fatalf("GET current when idle: %d %q", code, body)
	}
	if out, _ := runCLI(t, "status", "--data", data); regexp.MustCompile(`(?m)^RUNNING`).MatchString(out) {
		t.Fatalf("status shows a running task when idle:\n%s", out)
	}
}
