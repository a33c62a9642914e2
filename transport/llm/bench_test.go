package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/transport/llm"
)

// canned answers every request with the same recorded body, in memory: the
// benchmark measures the brain, not a model or a network.
type canned struct {
	body   []byte
	ctype  string
	sent   int64
	header http.Header
}

func (c *canned) RoundTrip(r *http.Request) (*http.Response, error) {
	n, _ := io.Copy(io.Discard, r.Body)
	r.Body.Close()
	c.sent += n
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {c.ctype}},
		Body: io.NopCloser(bytes.NewReader(c.body)), Request: r}, nil
}

// benchTurn is a turn as an agent with a full window sees it: a system
// prompt, 40 messages of history, four tools with schemas, and two earlier
// tool-calling steps of the task.
func benchTurn(b *testing.B) agent.Turn {
	var specs []agent.ToolSpec
	for _, n := range []string{"file_append", "file_read", "file_write", "sleep_ms"} {
		t, err := tool.Lookup(n)
		if err != nil {
			b.Fatal(err)
		}
		specs = append(specs, agent.ToolSpec{Name: t.Name, Description: t.Description, Idempotent: t.Idempotent, Parameters: t.Parameters})
	}
	var hist []agent.Message
	for i := 0; i < 40; i++ {
		role := []string{"user", "assistant", "tool", "assistant"}[i%4]
		hist = append(hist, agent.Message{Role: role, Name: "file_read", TaskID: fmt.Sprint("t", i/4),
			Content: strings.Repeat(fmt.Sprintf("message %d ", i), 20)})
	}
	steps := []agent.TurnStep{
		{Calls: []agent.Call{{ID: "c1", Tool: "file_read", Args: json.RawMessage(`{"path":"notes.txt"}`)}},
			Results: []agent.ToolResult{{CallID: "c1", Tool: "file_read", Output: json.RawMessage(`{"content":"` + strings.Repeat("x", 1000) + `"}`)}}},
		{Calls: []agent.Call{{ID: "c2", Tool: "file_write", Args: json.RawMessage(`{"path":"out.txt","content":"done"}`)}},
			Results: []agent.ToolResult{{CallID: "c2", Tool: "file_write", Output: json.RawMessage(`{"bytes":4}`)}}},
	}
	return agent.Turn{AgentID: "bench", SystemPrompt: strings.Repeat("You are an agent. ", 20), History: hist,
		Memory: strings.Repeat("summary ", 50), Task: agent.Task{TaskID: "t99", Input: json.RawMessage(`"summarise the notes"`)},
		Step: 2, Steps: steps, Tools: specs}
}

// BenchmarkBrainTurn measures the openai brain's own cost of one step,
// without the model: building the request from the turn, encoding it,
// sending it through an in-memory transport, and decoding the answer.
func BenchmarkBrainTurn(b *testing.B) {
	for _, tc := range []struct{ name, file, ctype string }{
		{"answer", "testdata/one_turn.json", "application/json"},
		{"tool_call", "testdata/call_append.json", "application/json"},
		{"streamed", "testdata/stream_text.sse", "text/event-stream"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body, err := os.ReadFile(tc.file)
			if err != nil {
				b.Fatal(err)
			}
			rt := &canned{body: body, ctype: tc.ctype}
			br := &llm.Brain{Client: &llm.Client{BaseURL: "http://model.invalid/v1", Model: "m", HTTP: &http.Client{Transport: rt}},
				Stream: tc.ctype == "text/event-stream"}
			turn := benchTurn(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := br.Think(ctx, turn); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/turn")
			b.ReportMetric(float64(rt.sent)/float64(b.N), "request-bytes")
		})
	}
}
