package httpapi_test

import (
	"testing"
)

// Submit and wait: a POST with ?wait answers with the final state once the
// task is done; a task still running when the wait ends is answered 202
// with its current state; GET ?wait long-polls the same way.
func TestSubmitAndWait(t *testing.T) {
	h, _ := newAPI(t, "")
	status, body := do(t, h, "POST", "/agents/a1/tasks?wait=10s", `{"task_id":"w1","input":"hello"}`, "", "")
	if status != 200 || body["status"] != "done" || body["output"] != "hello" {
		t.Fatalf("POST ?wait: %d %v", status, body)
	}
	// A known task: the final state again, at once.
	if status, body = do(t, h, "POST", "/agents/a1/tasks?wait=10s", `{"task_id":"w1","input":"hello"}`, "", ""); status != 200 || body["status"] != "done" {
		t.Fatalf("duplicate POST ?wait: %d %v", status, body)
	}
	slow := `{"task_id":"w2","input":{"call":[{"tool":"sleep_ms","args":{"ms":1500}}]}}`
	if status, body = do(t, h, "POST", "/agents/a1/tasks?wait=50ms", slow, "", ""); status != 202 || (body["status"] != "queued" && body["status"] != "running") {
		t.Fatalf("POST ?wait shorter than the task: %d %v", status, body)
	}
	if status, body = do(t, h, "GET", "/agents/a1/tasks/w2?wait=20s", "", "", ""); status != 200 || body["status"] != "done" {
		t.Fatalf("GET ?wait: %d %v", status, body)
	}
	for _, bad := range []string{"forever", "-1s", "2h"} {
		if status, body = do(t, h, "GET", "/agents/a1/tasks/w2?wait="+bad, "", "", ""); status != 400 || body["code"] != "bad_wait" {
			t.Fatalf("wait=%s: %d %v", bad, status, body)
		}
	}
	if status, body = do(t, h, "GET", "/agents/a1/tasks/nope?wait=1s", "", "", ""); status != 404 {
		t.Fatalf("GET ?wait of an unknown task: %d %v", status, body)
	}
}
