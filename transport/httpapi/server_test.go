package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/transport/httpapi"
)

func newAPI(t *testing.T, token string) (*httpapi.Server, *agent.Runtime) {
	t.Helper()
	st, err := bbolt.Open(t.TempDir(), bbolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	echo, _ := brain.New(design.Brain{Provider: "echo"})
	rt, err := agent.Start(context.Background(), agent.Config{AgentID: "a1", Store: st, Brain: echo,
		Tools: tool.MustResolve("sleep_ms"), ArtifactsDir: t.TempDir(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	return httpapi.New(httpapi.Options{Agents: httpapi.Single{R: rt}, MaxTaskBytes: 1024, Token: token, Log: zerolog.Nop()}), rt
}

func do(t *testing.T, h http.Handler, method, path, body, remote, auth string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if remote != "" {
		req.RemoteAddr = remote
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if n := strings.Count(rec.Body.String(), "\n"); n != 1 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s: not one line of JSON: %q", method, path, rec.Body.String())
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", method, path, rec.Body.String())
	}
	return rec.Code, out
}

func TestTaskAPI(t *testing.T) {
	h, _ := newAPI(t, "")
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"accepted", "POST", "/agents/a1/tasks", `{"task_id":"t1","input":"hi"}`, 202, ""},
		{"duplicate", "POST", "/agents/a1/tasks", `{"task_id":"t1","input":"hi"}`, 200, ""},
		{"bad json", "POST", "/agents/a1/tasks", `{"task_id":`, 400, "bad_json"},
		{"missing id", "POST", "/agents/a1/tasks", `{"input":"x"}`, 400, "missing_task_id"},
		{"bad id", "POST", "/agents/a1/tasks", `{"task_id":"../x"}`, 400, "bad_task_id"},
		{"too large", "POST", "/agents/a1/tasks", `{"task_id":"big","input":"` + strings.Repeat("x", 2000) + `"}`, 400, "too_large"},
		{"unknown agent", "POST", "/agents/zz/tasks", `{"task_id":"t2"}`, 404, "unknown_agent"},
		{"unknown task", "GET", "/agents/a1/tasks/nope", ``, 404, "unknown_task"},
		{"health", "GET", "/healthz", ``, 200, ""},
		{"duplicate key", "POST", "/agents/a1/tasks", `{"task_id":"a","task_id":"b"}`, 400, "bad_json"},
		{"unknown field", "POST", "/agents/a1/tasks", `{"task_id":"x2","inptu":"hello"}`, 400, "bad_json"},
		{"not an object", "POST", "/agents/a1/tasks", `["x"]`, 400, "bad_json"},
		{"unknown route", "GET", "/nope", ``, 404, "not_found"},
		{"wrong method", "DELETE", "/agents/a1/tasks", ``, 405, "method_not_allowed"},
		{"wrong method on a task", "POST", "/agents/a1/tasks/t1", `{}`, 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, h, tc.method, tc.path, tc.body, "", "")
			if status != tc.status || (tc.code != "" && body["code"] != tc.code) {
				t.Fatalf("%d %v, want %d %s", status, body, tc.status, tc.code)
			}
			if tc.code != "" && body["error"] == "" {
				t.Fatal("error body without a message")
			}
		})
	}
	// The refusals say what was wrong in the API's words: the unknown field
	// named, the JSON expected, never a Go type.
	for body, want := range map[string]string{
		`{"task_id":"x2","inptu":"hello"}`: `task has an unknown field "inptu"`,
		`["x"]`:                            "task must be a JSON object, not an array",
	} {
		_, out := do(t, h, "POST", "/agents/a1/tasks", body, "", "")
		if msg, _ := out["error"].(string); !strings.Contains(msg, want) || strings.Contains(msg, "Go ") {
			t.Errorf("%s: error %q, want %q", body, msg, want)
		}
	}
	if status, _ := do(t, h, "GET", "/agents/a1/tasks/x2", "", "", ""); status != 404 {
		t.Errorf("the task with an unknown field was queued: GET answers %d", status)
	}
	wait.Until(t, 5*time.Second, "t1 done", func() error {
		status, body := do(t, h, "GET", "/agents/a1/tasks/t1", "", "", "")
		if status == 200 && body["status"] == "done" && body["output"] == "hi" {
			return nil
		}
		return fmt.Errorf("t1 = %d %v", status, body)
	})
	status, body := do(t, h, "GET", "/agents/a1/snapshot", "", "", "")
	if status != 200 || body["agent_id"] != "a1" || body["tick_index"].(float64) < 1 {
		t.Fatalf("snapshot = %d %v", status, body)
	}
}

// TestNonASCIIID: an id refused for a non-ASCII character is quoted as
// that character, in valid UTF-8, in the JSON answer.
func TestNonASCIIID(t *testing.T) {
	h, _ := newAPI(t, "")
	status, body := do(t, h, "POST", "/agents/a1/tasks", `{"task_id":"tâche"}`, "", "")
	if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, "'â'") || strings.Contains(msg, "Ã") {
		t.Fatalf("%d %v", status, body)
	}
}

// TestTooLargeOverTheWire: a 10 MB task on a real listener is answered
// 400 too_large every time, not a connection reset.
func TestTooLargeOverTheWire(t *testing.T) {
	h, _ := newAPI(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpx.NewServer(h, httpx.Limits{})
	go func() { _ = srv.Serve(httpx.Listen(ln, httpx.Limits{}, false, zerolog.Nop())) }()
	defer srv.Close()
	big := `{"task_id":"big","input":"` + strings.Repeat("x", 10<<20) + `"}`
	for i := range 6 {
		resp, err := http.Post("http://"+ln.Addr().String()+"/agents/a1/tasks", "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		var e struct{ Error, Code string }
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || e.Code != "too_large" {
			t.Fatalf("try %d: %d %+v %v", i, resp.StatusCode, e, err)
		}
	}
}

func TestTokenOffLoopback(t *testing.T) {
	h, _ := newAPI(t, "s3cret")
	cases := []struct {
		name, remote, auth string
		status             int
	}{
		{"loopback needs no token", "127.0.0.1:5000", "", 200},
		{"ipv6 loopback", "[::1]:5000", "", 200},
		{"remote without token", "192.0.2.10:5000", "", 401},
		{"remote wrong token", "192.0.2.10:5000", "Bearer nope", 401},
		{"remote right token", "192.0.2.10:5000", "Bearer s3cret", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, h, "GET", "/healthz", "", tc.remote, tc.auth)
			if status != tc.status {
				t.Fatalf("%d %v, want %d", status, body, tc.status)
			}
			if status == 401 && body["code"] != "unauthorized" {
				t.Fatalf("body %v", body)
			}
		})
	}
}

// TestPlanNamespace: a task id of the plan: namespace is accepted only with
// the agent's control token in X-OpenStarry-Plan-Token (the daemon's
// dispatcher); any other request gets reserved_task_id, so that nobody
// can pre-empt a plan task by choosing its id (issue 29).
func TestPlanNamespace(t *testing.T) {
	_, rt := newAPI(t, "")
	h := httpapi.New(httpapi.Options{Agents: httpapi.Single{R: rt}, MaxTaskBytes: 1024, PlanToken: "agent-token", Log: zerolog.Nop()})
	bare, _ := newAPI(t, "") // an agent without a daemon: no token opens the namespace
	id := "plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:task_p1_a_001:0"
	body := `{"task_id":"` + id + `","input":"x"}`
	for _, tc := range []struct {
		name  string
		h     http.Handler
		token string
		code  int
	}{
		{"no token", h, "", 400},
		{"wrong token", h, "agent-tokeN", 400},
		{"the agent's token", h, "agent-token", 202},
		{"no daemon", bare, "agent-token", 400},
	} {
		req := httptest.NewRequest("POST", "/agents/a1/tasks", strings.NewReader(body))
		if tc.token != "" {
			req.Header.Set(httpx.HeaderPlanToken, tc.token)
		}
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		if rec.Code != tc.code || tc.code == 400 && !strings.Contains(rec.Body.String(), `"code":"reserved_task_id"`) {
			t.Errorf("%s: %d %s", tc.name, rec.Code, rec.Body.String())
		}
	}
}
