package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
)

// modelTemplate writes the shipped local-model template with its base_url
// pointing at srv, and returns the file.
func modelTemplate(t *testing.T, srv *llmtest.Server) string {
	t.Helper()
	var tmpl map[string]any
	if err := json.Unmarshal(mustShipped(t, "local-model"), &tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl["brain"].(map[string]any)["base_url"] = srv.BaseURL()
	data, _ := json.Marshal(tmpl)
	file := filepath.Join(t.TempDir(), "local-model.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// The shipped template for a local model server validates and runs a task
// against a server speaking the chat completions API.
func TestShippedModelTemplateRuns(t *testing.T) {
	srv := llmtest.New(t, llmtest.Answer{File: "../../transport/llm/testdata/one_turn.json"})
	file := modelTemplate(t, srv)
	if out, code := runCLI(t, "templates", "validate", file); code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("templates validate: exit %d\n%s", code, out)
	}
	data := t.TempDir()
	c := startChild(t, true, "run", "--agent", "m1", "--template", file, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
	base := c.url()
	code, body, err := postTask(context.Background(), base, "m1", []byte(`{"task_id":"q1","input":"What is the capital of France?"}`))
	if err != nil || (code != 200 && code != 202) {
		t.Fatalf("post: %d %s %v", code, body, err)
	}
	st := waitTask(t, base, "m1", "q1")
	if st.Status != "done" || string(st.Output) != `"Paris is the capital of France."` {
		t.Fatalf("result = %+v\n%s", st, c.logs())
	}
}

// SIGKILL of the real binary after the model answered with tool calls but
// before the non-idempotent tool ran: after the restart the model is not
// asked that question again, and the tool runs exactly once.
func TestModelCrashAfterAnswer(t *testing.T) {
	var (
		mu       sync.Mutex
		first    int // requests without tool results: the task's first question
		answered = make(chan struct{}, 8)
	)
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		if req.Body.ToolResults() == 0 {
			mu.Lock()
			first++
			mu.Unlock()
			answered <- struct{}{}
			// A wait long enough to kill the process during it, then the
			// non-idempotent append.
			return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"call_w","type":"function","function":{"name":"sleep_ms","arguments":"{\"ms\":4000}"}},` +
				`{"id":"call_a","type":"function","function":{"name":"file_append","arguments":"{\"file\":\"out.txt\",\"line\":\"appended\"}"}}]}}]}`}
		}
		return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"appended once"}}]}`}
	})
	file := modelTemplate(t, srv)
	data := t.TempDir()
	args := []string{"run", "--agent", "m1", "--template", file, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt"}
	c := startChild(t, true, args...)
	code, body, err := postTask(context.Background(), c.url(), "m1", []byte(`{"task_id":"k1","input":"append a line"}`))
	if err != nil || (code != 200 && code != 202) {
		t.Fatalf("post: %d %s %v", code, body, err)
	}
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		t.Fatalf("the model was never asked\n%s", c.logs())
	}
	// The answer is saved within milliseconds; the wait tool runs 4s.
	time.Sleep(700 * time.Millisecond)
	c.kill()
	out := filepath.Join(host.ArtifactsDir(data, "m1"), "out.txt")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("out.txt exists before the restart (%v): the kill came too late", err)
	}

	c = startChild(t, true, args...)
	st := waitTask(t, c.url(), "m1", "k1")
	if st.Status != "done" || string(st.Output) != `"appended once"` {
		t.Fatalf("result = %+v\n%s", st, c.logs())
	}
	mu.Lock()
	n := first
	mu.Unlock()
	if n != 1 {
		t.Fatalf("the model was asked the first question %d times, want 1", n)
	}
	if got := countLines(t, out); len(got) != 1 || got["appended"] != 1 {
		t.Fatalf("out.txt lines = %v, want one", got)
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1].Body; last.ToolResults() != 2 || !strings.Contains(string(reqs[len(reqs)-1].Raw), `\"bytes\":9`) {
		t.Fatalf("the last request = %s", reqs[len(reqs)-1].Raw)
	}
}
