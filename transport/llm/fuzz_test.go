package llm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/transport/llm"
)

func seeds(f *testing.F, pattern string) {
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzDecodeResponse: any bytes decode to an answer or an error, never a
// panic, and every call it returns has a tool name and arguments that are
// valid JSON (they go into the snapshot as they are).
func FuzzDecodeResponse(f *testing.F) {
	seeds(f, "*.json")
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"function":{"name":"x","arguments":{"a":1}}}]}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"function":{"name":"x","arguments":"{oops"}}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := llm.DecodeResponse(data)
		if err != nil {
			return
		}
		checkCalls(t, c)
	})
}

// FuzzDecodeStream: the same promise for a streamed answer.
func FuzzDecodeStream(f *testing.F) {
	seeds(f, "*.sse")
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"name\":\"a\",\"arguments\":\"{\"}}]}}]}\n\ndata: [DONE]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := llm.DecodeStream(bytes.NewReader(data), func(int) {}, time.Millisecond)
		if err != nil {
			return
		}
		checkCalls(t, c)
	})
}

func checkCalls(t *testing.T, c llm.Completion) {
	for _, call := range c.Calls {
		if call.Tool == "" || call.ID == "" {
			t.Fatalf("call without a name or id: %+v", call)
		}
		if len(call.Args) > 0 && !json.Valid(call.Args) {
			t.Fatalf("call arguments are not JSON: %q", call.Args)
		}
	}
}

// FuzzErrorDetails: any error body gives a message (the start of the body
// at worst) and never a panic; token counts are what the body says.
func FuzzErrorDetails(f *testing.F) {
	f.Add([]byte(`{"error":{"code":400,"message":"request (2119 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2119,"n_ctx":512}}`))
	f.Add([]byte(`{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`))
	f.Add([]byte(`{"error":"model not found"}`))
	f.Add([]byte(`Internal Server Error`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, _, _, _ := llm.ErrorDetails(data)
		if len(bytes.TrimSpace(data)) > 0 && msg == "" && !bytes.Contains(data, []byte(`"error"`)) {
			t.Fatalf("no message for %q", data)
		}
	})
}

func TestContextExceeded(t *testing.T) {
	for _, tc := range []struct {
		body  string
		code  int
		want  bool
		nP, n int
	}{
		{`{"error":{"code":400,"message":"request (2119 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2119,"n_ctx":512}}`, 400, true, 2119, 512},
		{`{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`, 400, true, 0, 0},
		{`{"error":{"message":"bad model","type":"invalid_request_error"}}`, 400, false, 0, 0},
		{`{"error":{"code":500,"message":"x","type":"exceed_context_size_error"}}`, 500, false, 0, 0},
	} {
		se := &llm.StatusError{Code: tc.code}
		se.Message, se.Type, se.PromptTokens, se.ContextTokens = llm.ErrorDetails([]byte(tc.body))
		if se.ContextExceeded() != tc.want || se.PromptTokens != tc.nP || se.ContextTokens != tc.n {
			t.Errorf("%s: exceeded %v (%d of %d), want %v", tc.body, se.ContextExceeded(), se.PromptTokens, se.ContextTokens, tc.want)
		}
	}
}
