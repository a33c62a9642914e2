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
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// modelTemplate writes the shipped local-model template with its base_url
// pointing at srv (and the brain's other fields set from brain), and
// returns the file.
func modelTemplate(t *testing.T, srv *llmtest.Server, brain ...map[string]any) string {
	t.Helper()
	var tmpl map[string]any
	if err := json.Unmarshal(mustShipped(t, "local-model"), &tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl["brain"].(map[string]any)["base_url"] = srv.BaseURL()
	for _, b := range brain {
		for k, v := range b {
			tmpl["brain"].(map[string]any)[k] = v
		}
	}
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

// A streamed answer's token count reaches the MQTT progress topic while
// the model answers, and the result follows on the results topic. The
// server writes a line every 50 ms, as a model does: a report still
// waiting when the next one comes is replaced by it (docs/mqtt.md), so a
// stream written all at once may report only its end.
func TestModelTokensOnProgressTopic(t *testing.T) {
	srv := llmtest.New(t, llmtest.Answer{File: "../../transport/llm/testdata/stream_text.sse", Stream: true, Gap: 50 * time.Millisecond})
	file := modelTemplate(t, srv, map[string]any{"stream": true})
	data := t.TempDir()
	c := runAgentMQTT(t, "m1", data, "--template", file, "--broker-listen", "127.0.0.1:0")
	url := embeddedURL(t, c)
	col := mqtttest.Collect(t, url, "observer-tokens", true, "openstarry/#")
	mqtttest.Publish(t, mqttPublisher(t, url), tasksTopic("m1"), mqttTask("s1", "stream please"))
	progress := "openstarry/" + mqttDevice + "/agents/m1/progress"
	wait.For(t, 20*time.Second, "the result and a token count on the progress topic", func() bool {
		tokens := false
		for _, m := range col.Messages(progress) {
			tokens = tokens || strings.Contains(string(m.Payload), `"task_id":"s1"`) && strings.Contains(string(m.Payload), `thinking: 3 tokens`)
		}
		return tokens && len(mqtttest.Results(t, col, resultsTopic("m1"))["s1"]) > 0
	})
	if r := mqtttest.Results(t, col, resultsTopic("m1"))["s1"][0]; r.Status != "done" || string(r.Output) != `"Paris."` {
		t.Fatalf("result %+v", r)
	}
}
