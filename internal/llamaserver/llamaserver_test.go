package llamaserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/internal/llamaserver"
)

const appendTool = `{"type":"function","function":{"name":"file_append","description":"append a line",
 "parameters":{"type":"object","properties":{"file":{"type":"string"},"line":{"type":"string"}},"required":["file","line"]}}}`

// TestTinyModel checks the model's behaviour on the real server: a tool call
// when offered tools, the answer after a tool result, plain text without
// tools, and the long answer SlowWord asks for.
func TestTinyModel(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Predict: 50})
	call := `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"file_append","arguments":"{\"file\":\"notes.txt\",\"line\":\"hello\"}"}}]}`
	for _, tc := range []struct {
		name, body   string
		wantFinish   string
		wantContent  string
		wantCallArgs string
	}{
		{"tool call", `{"messages":[{"role":"user","content":"write hello"}],"tools":[` + appendTool + `]}`,
			"tool_calls", "", `{"file": "notes.txt", "line": "hello"}`},
		{"after the result", `{"messages":[{"role":"user","content":"write hello"},` + call +
			`,{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[` + appendTool + `]}`, "stop", "done", ""},
		{"no tools", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`, "stop", "hello", ""},
		{"slow", `{"messages":[{"role":"user","content":"take your time ` + llamaserver.SlowWord + `"}]}`,
			"length", strings.Repeat("la", 50), ""},
		{"slow after the result", `{"messages":[{"role":"user","content":"write hello ` + llamaserver.SlowWord + `"},` + call +
			`,{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[` + appendTool + `]}`, "length", strings.Repeat("la", 50), ""},
		{"slow with tools calls first", `{"messages":[{"role":"user","content":"write hello ` + llamaserver.SlowWord + `"}],"tools":[` + appendTool + `]}`,
			"tool_calls", "", `{"file": "notes.txt", "line": "hello"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // deterministic: the same answer twice
				resp, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, data)
				}
				var r struct {
					Choices []struct {
						FinishReason string `json:"finish_reason"`
						Message      struct {
							Content   string `json:"content"`
							ToolCalls []struct {
								Function struct{ Name, Arguments string } `json:"function"`
							} `json:"tool_calls"`
						} `json:"message"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) != 1 {
					t.Fatalf("%v: %s", err, data)
				}
				c := r.Choices[0]
				if c.FinishReason != tc.wantFinish || c.Message.Content != tc.wantContent {
					t.Fatalf("finish %q content %q, want %q %q: %s", c.FinishReason, c.Message.Content, tc.wantFinish, tc.wantContent, data)
				}
				if tc.wantCallArgs != "" && (len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "file_append" ||
					c.Message.ToolCalls[0].Function.Arguments != tc.wantCallArgs) {
					t.Fatalf("tool calls: %s", data)
				}
			}
		})
	}
}

// TestModelFile checks the GGUF writer's framing: magic, version, the
// counts, and tensor data aligned to 32 bytes at the end of the file.
func TestModelFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := (llamaserver.Model{}).Write(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("GGUF\x03\x00\x00\x00")) {
		t.Fatalf("header % x", data[:8])
	}
	if len(data)%32 != 0 || len(data) > 1<<20 {
		t.Fatalf("size %d: want a multiple of 32 under 1 MiB", len(data))
	}
	if err := (llamaserver.Model{Call: strings.Repeat("x", 2000)}).Write(path); err == nil {
		t.Fatal("a call of 2000 bytes was accepted")
	}
}

// A model made to call another tool with other arguments, and to answer
// other words: what the tests choose is what the server returns.
func TestTinyModelCustomCall(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Model: llamaserver.Model{
		Call: `{"name": "sleep_ms", "arguments": {"ms": 25}}`, Plain: "bonjour"}})
	body := `{"messages":[{"role":"user","content":"wait"}],"tools":[{"type":"function","function":{"name":"sleep_ms",
 "parameters":{"type":"object","properties":{"ms":{"type":"integer"}},"required":["ms"]}}}]}`
	for _, tc := range []struct{ body, want string }{
		{body, `"arguments":"{\"ms\": 25}"`},
		{`{"messages":[{"role":"user","content":"hi"}]}`, `"content":"bonjour"`},
	} {
		resp, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(data), tc.want) {
			t.Fatalf("%d %s, want %s", resp.StatusCode, data, tc.want)
		}
	}
}
