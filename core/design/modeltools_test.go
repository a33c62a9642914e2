package design_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
)

// schemaWith returns an object schema of n optional string properties, each
// with a description of desc bytes.
func schemaWith(n, desc int) json.RawMessage {
	props := map[string]any{}
	for i := range n {
		props[fmt.Sprintf("field_%d", i)] = map[string]any{"type": "string", "description": strings.Repeat("d", desc)}
	}
	out, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	return out
}

// atBound is MaxModelTools tools whose definitions take just under
// MaxModelToolBytes, the first one file_append (the tiny model calls it).
func atBound() []design.ModelTool {
	tools := []design.ModelTool{{Name: "file_append", Description: "Append a line.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"file":{"type":"string"},"line":{"type":"string"}},"required":["file","line"]}`)}}
	for i := 1; i < design.MaxModelTools; i++ {
		tools = append(tools, design.ModelTool{Name: fmt.Sprintf("tool_%02d", i), Description: strings.Repeat("x", 60),
			Parameters: schemaWith(6, 12)})
	}
	return tools
}

func toolBytes(tools []design.ModelTool) int {
	n := 0
	for _, t := range tools {
		def, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
		n += len(def)
	}
	return n
}

func TestModelToolProblems(t *testing.T) {
	bound := atBound()
	if n := toolBytes(bound); n > design.MaxModelToolBytes || n < design.MaxModelToolBytes*9/10 {
		t.Fatalf("the set at the bound takes %d bytes", n)
	}
	tooMany := append(atBound()[:design.MaxModelTools], design.ModelTool{Name: "one_more"})
	big := []design.ModelTool{{Name: "wide", Parameters: schemaWith(design.MaxSchemaProperties+1, 0)}}
	long := []design.ModelTool{{Name: "long", Description: strings.Repeat("y", design.MaxModelToolBytes)}}
	for _, tc := range []struct {
		name  string
		tools []design.ModelTool
		want  []string
	}{
		{"at the bound", bound, nil},
		{"one tool too many", tooMany, []string{"33 tools offered to a model: at most 32"}},
		{"too many properties", big, []string{`tool "wide" has 257 properties in its schema: at most 256`}},
		{"definitions too long", long, []string{"the tools' definitions take 16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, msgs := design.ModelToolProblems(tc.tools)
			if len(msgs) != len(tc.want) {
				t.Fatalf("problems %q, want %d", msgs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(msgs[i], w) {
					t.Fatalf("problem %q, want %q", msgs[i], w)
				}
			}
		})
	}
}

// templates validate refuses an openai template over the bounds, with the
// rule and the reason, and leaves an echo template alone.
func TestValidateModelTools(t *testing.T) {
	v := design.Validator{KnownTool: func(string) bool { return true }, ToolDefinition: func(name string) (design.ModelTool, bool) {
		if name == "wide" {
			return design.ModelTool{Name: name, Parameters: schemaWith(300, 0)}, true
		}
		return design.ModelTool{Name: name, Description: "a tool"}, true
	}}
	tmpl := func(provider string, tools ...string) []byte {
		b, _ := json.Marshal(map[string]any{"name": "m", "version": "1.0.0", "role": "worker",
			"brain": map[string]any{"provider": provider, "base_url": "http://127.0.0.1:8080/v1", "model": "x"}, "tools": tools, "system_prompt": "s",
			"context_budget": map[string]any{"max_messages": 10, "max_tokens": 1000}})
		return b
	}
	var many []string
	for i := range 33 {
		many = append(many, fmt.Sprintf("t%d", i))
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"few", tmpl("openai", "a", "b"), ""},
		{"many", tmpl("openai", many...), "m.json: /tools: model_tools: 33 tools offered to a model: at most 32"},
		{"wide", tmpl("openai", "a", "wide"), `m.json: /tools/1: model_tools: tool "wide" has 300 properties`},
		{"many, echo", tmpl("echo", many...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Validate("m.json", tc.data)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestModelToolBoundsOnRealServer measures the bounds against llama-server:
// the set at the bound is answered with a tool call; one schema of 1,024
// properties (four times the bound) is refused with "failed to parse
// grammar", and ModelToolProblems flags it.
func TestModelToolBoundsOnRealServer(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Context: 32768, Predict: 50})
	ask := func(tools []design.ModelTool) (int, string, time.Duration) {
		var defs []any
		for _, tl := range tools {
			defs = append(defs, map[string]any{"type": "function", "function": map[string]any{
				"name": tl.Name, "description": tl.Description, "parameters": tl.Parameters}})
		}
		body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}, "tools": defs})
		start := time.Now()
		resp, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data), time.Since(start)
	}
	code, body, took := ask(atBound())
	if code != 200 || !strings.Contains(body, `"name":"file_append"`) {
		t.Fatalf("%d tools in %d bytes: %d %s", design.MaxModelTools, toolBytes(atBound()), code, body)
	}
	t.Logf("%d tools in %d bytes answered in %s", design.MaxModelTools, toolBytes(atBound()), took)
	wide := append(atBound()[:1], design.ModelTool{Name: "wide", Description: "many fields", Parameters: schemaWith(1024, 10)})
	code, body, _ = ask(wide)
	if code != 400 || !strings.Contains(body, "failed to parse grammar") {
		t.Fatalf("a schema of 1024 properties: %d %s", code, body)
	}
	if _, msgs := design.ModelToolProblems(wide); len(msgs) == 0 {
		t.Fatal("ModelToolProblems accepts the schema llama-server refuses")
	}
}
