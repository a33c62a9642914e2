//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestSessionScenario walks docs/sessions.md as a user would, through the
// real daemon and its real master process (issue 29): two projects at once
// with equal plan shapes, a task sent straight to the agent that tries to
// pre-empt a plan task, kill -9 of the master in the middle of a task,
// SIGTERM of the daemon in the middle of a task, reject → resume →
// approve, two revisions then approve. It reads the API as JSON without
// this package's types, so that it runs against any version.
func TestSessionScenario(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "sessions:\n  checkpoint_interval: 300ms\n")
	d := startDaemon(t, cfg)
	base := daemonStatus(t, data).HTTP
	sc := &scenario{t: t, data: data}

	t.Run("equal plans of two projects", func(t *testing.T) {
		// Item 1: two projects at once, same plan shape, their own results.
		mk := func(name, input string) string {
			return sc.create(t, base, map[string]any{"name": name, "tasks": []any{
				map[string]any{"phase": 1, "type": "a", "input": input},
				map[string]any{"phase": 1, "type": "b", "input": map[string]any{"call": []any{
					map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 300}},
					map[string]any{"tool": "file_append", "args": map[string]string{"file": "ledger.txt", "line": name + " b"}}}},
					"depends_on": []any{0}},
				map[string]any{"phase": 2, "type": "c", "input": name + " c"},
			}})
		}
		a, b := mk("A", "first project input"), mk("B", "SECOND project input")
		for _, p := range []struct{ id, name, input string }{{a, "A", "first project input"}, {b, "B", "SECOND project input"}} {
			v := sc.waitStatus(t, base, p.id, "completed")
			if got := str(task(v, "task_p1_a_001")["result"]); got != p.input {
				t.Errorf("project %s: task_p1_a_001 result %q, want %q", p.name, got, p.input)
			}
			if got := str(task(v, "task_p2_c_001")["result"]); got != p.name+" c" {
				t.Errorf("project %s: task_p2_c_001 result %q", p.name, got)
			}
			if n := ledger(t, data, p.id)[p.name+" b"]; n != 1 {
				t.Errorf("project %s: its tool ran %d times", p.name, n)
			}
			if pr := obj(v["progress"]); num(pr["completed"]) != 3 || num(pr["percent"]) != 100 {
				t.Errorf("project %s: progress %v", p.name, pr)
			}
		}
	})

	t.Run("a direct task cannot pre-empt a plan task", func(t *testing.T) {
		// Item 1: the id a plan task will have, sent first with an
		// attacker's input, neither answers for it nor keeps its tool from
		// running; an id of the plan namespace is refused.
		body := `{"task_id":"task_p1_preempt_001","input":"attacker's input"}`
		if code, out, err := postTask(t.Context(), base, "master", []byte(body)); err != nil || code/100 != 2 {
			t.Fatalf("the direct task: %d %s %v", code, out, err)
		}
		waitTask(t, base, "master", "task_p1_preempt_001")
		id := sc.create(t, base, map[string]any{"name": "victim", "tasks": []any{
			map[string]any{"phase": 1, "type": "preempt", "input": map[string]any{"call": []any{
				map[string]any{"tool": "file_append", "args": map[string]string{"file": "ledger.txt", "line": "the plan's tool ran"}}}}}}})
		v := sc.waitStatus(t, base, id, "completed")
		res := task(v, "task_p1_preempt_001")
		if strings.Contains(fmt.Sprint(res["result"]), "attacker") || ledger(t, data, id)["the plan's tool ran"] != 1 {
			t.Errorf("plan task answered by the direct task: %v; ledger %v", res["result"], ledger(t, data, id))
		}
		agentTask := str(res["agent_task_id"])
		if !strings.HasPrefix(agentTask, "plan:"+id+":") {
			t.Errorf("agent task id %q", agentTask)
		}
		for _, forged := range []string{agentTask, "plan:anything"} {
			b, _ := json.Marshal(map[string]any{"task_id": forged, "input": "forged"})
			code, out, err := postTask(t.Context(), base, "master", b)
			if err != nil || code != 400 || !strings.Contains(string(out), `"code":"reserved_task_id"`) {
				t.Errorf("a direct task with id %s: %d %s %v", forged, code, out, err)
			}
		}
	})

	t.Run("kill -9 of the master mid-task", func(t *testing.T) {
		id := sc.create(t, base, map[string]any{"name": "killed", "tasks": []any{
			map[string]any{"phase": 1, "type": "slow", "input": map[string]any{"call": []any{
				map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 3000}},
				map[string]any{"tool": "file_append", "args": map[string]string{"file": "ledger.txt", "line": "slow"}}}}},
			map[string]any{"phase": 2, "type": "after", "input": "after"}}})
		agentTask := sc.waitRunning(t, base, id, "task_p1_slow_001")
		m, _ := agentInfo(daemonStatus(t, data), "master")
		if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s := sc.waitSession(t, base, id, 0, "interrupted")
		if s["interruption_reason"] != "crash" {
			t.Fatalf("session %v", s)
		}
		sc.resume(t, base, id, str(s["id"]))
		v := sc.waitStatus(t, base, id, "completed")
		if n := ledger(t, data, id)["slow"]; n != 1 {
			t.Errorf("the killed task's tool ran %d times", n)
		}
		if got := str(task(v, "task_p1_slow_001")["agent_task_id"]); got != agentTask {
			t.Errorf("the resumed session handed the task in progress as %s, not %s", got, agentTask)
		}
	})

	t.Run("SIGTERM of the daemon mid-task", func(t *testing.T) {
		// Item 3: a clean stop is recorded as shutdown, not crash.
		id := sc.create(t, base, map[string]any{"name": "stopped", "tasks": []any{
			map[string]any{"phase": 1, "type": "halt", "input": map[string]any{"call": []any{
				map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 6000}}}}}}})
		sc.waitRunning(t, base, id, "task_p1_halt_001")
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := d.wait(60 * time.Second); err != nil || code != 0 {
			t.Fatalf("daemon exit %d %v\n%s", code, err, d.logs())
		}
		d = startDaemon(sc.t, cfg) // the whole test's: it outlives this part
		base = daemonStatus(t, data).HTTP
		d.waitLog("previous run: clean", 5*time.Second)
		s := sc.waitSession(t, base, id, 0, "interrupted")
		if s["interruption_reason"] != "shutdown" {
			t.Errorf("session stopped by SIGTERM: %v", s)
		}
		sc.resume(t, base, id, str(s["id"]))
		sc.waitStatus(t, base, id, "completed")
	})

	t.Run("reject, resume, approve", func(t *testing.T) {
		// Items 2, 5, 6, 8.
		id := sc.create(t, base, map[string]any{"name": "rejected", "tasks": []any{
			map[string]any{"phase": 1, "type": "a", "input": "first"},
			map[string]any{"phase": 1, "type": "review", "input": "review me", "approval": true, "depends_on": []any{0}},
			map[string]any{"phase": 2, "type": "c", "input": "last"}}})
		ap := sc.pending(t, base, id, 0)
		if str(ap["result"]) != "review me" {
			t.Errorf("the approval does not carry the result under review: %v", ap)
		}
		sc.decide(t, base, ap, "reject", "not like this")
		s := sc.waitSession(t, base, id, 0, "interrupted")
		if s["interruption_reason"] != "error" {
			t.Fatalf("session %v", s)
		}
		// Item 6: one measure of progress, everywhere.
		v := sc.project(t, base, id)
		if pr := obj(v["progress"]); num(pr["completed"]) != 1 || num(pr["percent"]) != 33 {
			t.Errorf("progress after the rejection: %v", pr)
		}
		if out, code := runCLI(t, "project", "show", id, "--data", data); code != 0 || !strings.Contains(out, "1/3 tasks completed (33%)") ||
			!strings.Contains(out, "LEADER master") {
			t.Errorf("project show: %d %s", code, out)
		}
		// Item 7: the agent's type (its template's), and its id beside it.
		if s["current_agent_type"] != "general" || s["current_agent_role"] != "LEADER" || s["current_agent_id"] != "master" {
			t.Errorf("current agent of the session: %v", s)
		}
		child := sc.resume(t, base, id, str(s["id"]))
		// The gate asks again, for the new attempt; the child session
		// does not fail on the old decision.
		ap2 := sc.pending(t, base, id, 1)
		if cs := sc.waitSession(t, base, id, 1, "active"); str(cs["id"]) != child {
			t.Fatalf("child session %v", cs)
		}
		sc.decide(t, base, ap2, "approve", "better")
		v = sc.waitStatus(t, base, id, "completed")
		if r := task(v, "task_p1_review_001"); num(r["attempt"]) != 1 || str(r["result"]) == "" {
			t.Errorf("reviewed task %v", r)
		}
		// Item 8: the rejection and the approval are recorded approaches.
		aps := sc.get(t, base+"/projects/"+id+"/approaches")
		failed, verified := arr(obj(aps)["failed"]), arr(obj(aps)["verified"])
		if len(failed) != 1 || len(verified) != 1 ||
			!strings.Contains(fmt.Sprint(obj(obj(failed[0])["approach"])["failure_reason"]), "not like this") ||
			fmt.Sprint(obj(obj(verified[0])["approach"])["learnings"]) != "[better]" {
			t.Errorf("approaches %v", aps)
		}
	})

	t.Run("two revisions, then approve", func(t *testing.T) {
		// Items 4, 5, 8.
		id := sc.create(t, base, map[string]any{"name": "revised", "tasks": []any{
			map[string]any{"phase": 1, "type": "draft", "approval": true, "input": map[string]any{"call": []any{
				map[string]any{"tool": "file_append", "args": map[string]string{"file": "draft.txt", "line": "a draft"}}}}}}})
		feedback := []string{"shorter", "friendlier"}
		var results []string
		for i, f := range feedback {
			ap := sc.pending(t, base, id, i)
			results = append(results, fmt.Sprint(ap["result"]))
			arts := arr(ap["artifacts"])
			if len(arts) != 1 || !strings.HasSuffix(str(arts[0]), "/artifacts/draft.txt") {
				t.Errorf("approval %v: artifacts %v", ap["id"], ap["artifacts"])
			} else {
				// The reviewer opens it.
				sess := str(ap["session_id"])
				code, body := api(t, "GET", base+"/projects/"+id+"/sessions/"+sess+"/artifacts/draft.txt", nil)
				if code != 200 || !strings.Contains(string(body), "a draft") {
					t.Errorf("the artifact: %d %s", code, body)
				}
			}
			if len(arr(ap["revision_history"])) != i {
				t.Errorf("approval of attempt %d: revision_history %v", i, ap["revision_history"])
			}
			sc.decide(t, base, ap, "revise", f)
		}
		ap := sc.pending(t, base, id, 2)
		sc.decide(t, base, ap, "approve", "")
		sc.waitStatus(t, base, id, "completed")
		final := obj(sc.get(t, fmt.Sprintf("%s/approvals/%v", base, ap["id"])))
		h := arr(final["revision_history"])
		if len(h) != 3 {
			t.Errorf("revision_history of the third approval: %v", final["revision_history"])
		}
		for i, want := range []string{"shorter", "friendlier", ""}[:min(3, len(h))] {
			r := obj(h[i])
			if num(r["attempt"]) != float64(i) || str(r["feedback"]) != want || str(r["by"]) == "" || str(r["at"]) == "" ||
				r["result"] == nil || i < 2 && fmt.Sprint(r["result"]) != results[i] {
				t.Errorf("round %d: %v", i, r)
			}
		}
		aps := obj(sc.get(t, base+"/projects/"+id+"/approaches"))
		if len(arr(aps["failed"])) != 2 || len(arr(aps["verified"])) != 1 {
			t.Errorf("approaches %v", aps)
		}
	})
}

// scenario holds the helpers of TestSessionScenario.
type scenario struct {
	t    *testing.T
	data string
}

func (sc *scenario) get(t *testing.T, url string) any {
	t.Helper()
	code, body := api(t, "GET", url, nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

func (sc *scenario) create(t *testing.T, base string, plan map[string]any) string {
	t.Helper()
	code, body := api(t, "POST", base+"/projects", plan)
	var v map[string]any
	if code != 201 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("POST /projects: %d %s", code, body)
	}
	return str(v["id"])
}

func (sc *scenario) project(t *testing.T, base, id string) map[string]any {
	t.Helper()
	return obj(sc.get(t, base+"/projects/"+id))
}

// waitStatus waits until the project's newest session has status.
func (sc *scenario) waitStatus(t *testing.T, base, id, status string) map[string]any {
	t.Helper()
	var v map[string]any
	wait.For(t, 60*time.Second, "project "+id+" "+status, func() bool {
		v = sc.project(t, base, id)
		return v["status"] == status
	})
	return v
}

// waitSession waits until the project's i-th session has status.
func (sc *scenario) waitSession(t *testing.T, base, id string, i int, status string) map[string]any {
	t.Helper()
	var s map[string]any
	wait.For(t, 60*time.Second, fmt.Sprintf("session %d of %s %s", i, id, status), func() bool {
		ss := arr(sc.get(t, base+"/projects/"+id+"/sessions"))
		if len(ss) <= i {
			return false
		}
		s = obj(ss[i])
		return s["status"] == status
	})
	return s
}

// waitRunning waits until the master runs the plan task, and returns the
// id it runs it under.
func (sc *scenario) waitRunning(t *testing.T, base, id, planTask string) string {
	t.Helper()
	var agentTask string
	wait.For(t, 60*time.Second, planTask+" running on the master", func() bool {
		agentTask = str(task(sc.project(t, base, id), planTask)["agent_task_id"])
		if agentTask == "" {
			agentTask = planTask // versions before the plan: namespace
		}
		code, st, err := getTask(base, "master", agentTask)
		return err == nil && code == 200 && st.Status == "running"
	})
	return agentTask
}

func (sc *scenario) resume(t *testing.T, base, id, sid string) string {
	t.Helper()
	code, body := api(t, "POST", base+"/projects/"+id+"/sessions/"+sid+"/resume", nil)
	var v map[string]any
	if code != 201 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("resume %s: %d %s", sid, code, body)
	}
	return str(obj(v["session"])["id"])
}

// pending waits for the project's one pending approval, of attempt.
func (sc *scenario) pending(t *testing.T, base, id string, attempt int) map[string]any {
	t.Helper()
	var ap map[string]any
	wait.For(t, 60*time.Second, fmt.Sprintf("a pending approval of attempt %d", attempt), func() bool {
		aps := arr(sc.get(t, base+"/projects/"+id+"/approvals?status=pending"))
		if len(aps) != 1 {
			return false
		}
		ap = obj(aps[0])
		return num(ap["attempt"]) == float64(attempt)
	})
	return ap
}

func (sc *scenario) decide(t *testing.T, base string, ap map[string]any, decision, feedback string) {
	t.Helper()
	code, body := api(t, "POST", fmt.Sprintf("%s/approvals/%v", base, ap["id"]),
		map[string]string{"decision": decision, "feedback": feedback, "decided_by": "scenario"})
	if code != 200 {
		t.Fatalf("%s approval %v: %d %s", decision, ap["id"], code, body)
	}
}

func task(v map[string]any, id string) map[string]any {
	for _, x := range arr(v["tasks"]) {
		if obj(x)["id"] == id {
			return obj(x)
		}
	}
	return map[string]any{}
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

func arr(v any) []any { a, _ := v.([]any); return a }

func str(v any) string { s, _ := v.(string); return s }

func num(v any) float64 { n, _ := v.(float64); return n }

// TestDaemonSurvivesClosedPipe: `make run 2>&1 | tee run.log`, then Ctrl-C,
// which ends tee first: the daemon's log writes fail, and it still stops
// cleanly (item 3 of issue 29). Before, it died of SIGPIPE at its next log
// line, and the next boot said "previous run: crash".
func TestDaemonSurvivesClosedPipe(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "start", "--config", cfg)
	cmd.Env = append(os.Environ(), "OPENSTARRY_LOG_FORMAT=json")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// Read until the boot completes, then go away as tee does.
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), "boot complete") {
		n, err := r.Read(buf)
		seen.Write(buf[:n])
		if err == io.EOF {
			t.Fatalf("the daemon exited before its boot completed: %s", seen.String())
		}
	}
	r.Close()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the daemon with its log pipe closed: %v (before the fix: signal: broken pipe)", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	c := startDaemon(t, cfg)
	c.waitLog("previous run: clean", 5*time.Second)
}
