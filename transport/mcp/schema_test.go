package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
)

// What llama-server refused, measured against it (TestNormalizedSchemaOnRealServer
// checks each again), and what normalizeSchema makes of it.
var schemaCases = []struct {
	name, in, want string
	dropped        []string
}{
	{"untouched", `{"type":"object","properties":{"q":{"type":"string","pattern":"^a","maxLength":40}},"required":["q"]}`, "", nil},
	{"relative $ref", `{"type":"object","properties":{"q":{"$ref":"other.json#/x"}}}`,
		`{"properties":{"q":{}},"type":"object"}`, []string{`$ref "other.json#/x" at /properties/q/$ref`}},
	{"$ref to nothing", `{"type":"object","properties":{"q":{"$ref":"#/$defs/missing"}}}`,
		`{"properties":{"q":{}},"type":"object"}`, []string{`$ref "#/$defs/missing" at /properties/q/$ref`}},
	{"local $ref kept", `{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"q":{"$ref":"#/$defs/s"}}}`, "", nil},
	{"huge minLength", `{"type":"object","properties":{"q":{"type":"string","minLength":2000}}}`,
		`{"properties":{"q":{"type":"string"}},"type":"object"}`, []string{"minLength 2000 at /properties/q/minLength"}},
	{"huge minItems", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"},"minItems":5000}}}`,
		`{"properties":{"l":{"items":{"type":"string"},"type":"array"}},"type":"object"}`, []string{"minItems 5000 at /properties/l/minItems"}},
	{"a property named $ref", `{"type":"object","properties":{"$ref":{"type":"string"}}}`, "", nil},
	{"enum data untouched", `{"type":"object","properties":{"e":{"enum":[{"$ref":"x"}]}}}`, "", nil},
}

func TestNormalizeSchema(t *testing.T) {
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			out, dropped := normalizeSchema(json.RawMessage(tc.in))
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if string(out) != want || strings.Join(dropped, "|") != strings.Join(tc.dropped, "|") {
				t.Fatalf("got %s dropped %q\nwant %s dropped %q", out, dropped, want, tc.dropped)
			}
		})
	}
}

// TestNormalizedSchemaOnRealServer: llama-server refuses a request offering
// a tool with each schema that normalizeSchema changes, and accepts the
// normalised one (the tiny model then calls file_append).
func TestNormalizedSchemaOnRealServer(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Predict: 50})
	ask := func(params json.RawMessage) (int, string) {
		var p map[string]any
		_ = json.Unmarshal(params, &p)
		props, _ := p["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		props["file"], props["line"] = map[string]any{"type": "string"}, map[string]any{"type": "string"}
		p["properties"], p["required"] = props, []string{"file", "line"}
		body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}},
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "file_append", "parameters": p}}}})
		resp, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, tc := range schemaCases {
		if tc.want == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			if code, body := ask(json.RawMessage(tc.in)); code != 400 {
				t.Fatalf("llama-server answered %d to the original schema: %s", code, body)
			}
			out, _ := normalizeSchema(json.RawMessage(tc.in))
			if code, body := ask(out); code != 200 || !strings.Contains(body, `"tool_calls"`) {
				t.Fatalf("llama-server answered %d to the normalised schema: %s", code, body)
			}
		})
	}
}

// FuzzNormalizeSchema: any input, no panic; a JSON input stays JSON, and a
// normalised schema has nothing left to drop.
func FuzzNormalizeSchema(f *testing.F) {
	for _, tc := range schemaCases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(`{"$ref":"#/a~1b/0","a/b":[{}]}`))
	f.Add([]byte(`[{"$ref":"#"}]`))
	f.Add([]byte(`{"$ref":"#/b/$ref","b":{"$ref":"zzz"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _ := normalizeSchema(data)
		if !json.Valid(data) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%s normalised to invalid JSON %s", data, out)
		}
		if again, dropped := normalizeSchema(out); len(dropped) > 0 {
			t.Fatalf("normalising %s again dropped %q (%s)", out, dropped, again)
		}
	})
}

// The tool handed to the agent carries the normalised schema, and the
// agent's log names the tool and what was dropped.
func TestWrapLogsNormalizedSchema(t *testing.T) {
	var buf bytes.Buffer
	env := host.ToolSourceEnv{AgentID: "a1", Log: zerolog.New(&buf)}
	tl := wrap(nil, design.MCPServer{Name: "files"}, remoteTool{Name: "read", InputSchema: json.RawMessage(schemaCases[1].in)}, env)
	if string(tl.Parameters) != schemaCases[1].want {
		t.Fatalf("parameters %s", tl.Parameters)
	}
	log := buf.String()
	if !strings.Contains(log, `"tool":"files__read"`) || !strings.Contains(log, `other.json#/x`) ||
		!strings.Contains(log, "grammar-driven model servers refuse were dropped") {
		t.Fatalf("log: %s", log)
	}
}
