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
