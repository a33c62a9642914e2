package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/tool"
)

func TestResolveTools(t *testing.T) {
	run := func(context.Context, tool.Env, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	mcp := []tool.Tool{
		{Name: "sleep_ms", Description: "from the MCP server", Run: run},
		{Name: "search", Run: run},
	}
	cases := []struct {
		name  string
		names []string
		mcp   []tool.Tool
		want  []string // name, or name+" (mcp)"
		err   error
	}{
		{"registered only", []string{"file_append", "sleep_ms"}, nil, []string{"file_append", "sleep_ms"}, nil},
		{"mcp tools follow", []string{"file_append"}, mcp, []string{"file_append", "sleep_ms (mcp)", "search (mcp)"}, nil},
		{"an mcp tool hides a registered one in place", []string{"sleep_ms", "file_append"}, mcp, []string{"sleep_ms (mcp)", "file_append", "search (mcp)"}, nil},
		{"a name only an mcp server has", []string{"search"}, mcp, []string{"search (mcp)", "sleep_ms (mcp)"}, nil},
		{"unknown", []string{"file_append", "rm_rf"}, nil, nil, tool.ErrUnknownTool},
		{"none", nil, nil, []string{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveTools(tc.names, tc.mcp)
			if !errors.Is(err, tc.err) || (err != nil) != (tc.err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			names := []string{}
			for _, g := range got {
				n := g.Name
				if slices.ContainsFunc(tc.mcp, func(m tool.Tool) bool { return m.Description == g.Description && m.Name == g.Name }) {
					n += " (mcp)"
				}
				names = append(names, n)
			}
			if err == nil && !slices.Equal(names, tc.want) {
				t.Fatalf("tools = %v, want %v", names, tc.want)
			}
		})
	}
}

// MCP tools over the model bounds are reported in the agent's log, with
// the tool when the problem is one tool's.
func TestWarnModelTools(t *testing.T) {
	var buf bytes.Buffer
	var tools []tool.Tool
	for i := range 33 {
		tools = append(tools, tool.Tool{Name: fmt.Sprintf("srv__t%d", i)})
	}
	props := map[string]any{}
	for i := range 300 {
		props[fmt.Sprint("p", i)] = map[string]any{"type": "string"}
	}
	wide, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	tools[5].Parameters = wide
	warnModelTools(zerolog.New(&buf), tools)
	log := buf.String()
	if !strings.Contains(log, "33 tools offered to a model: at most 32") ||
		!strings.Contains(log, `"tool":"srv__t5"`) || !strings.Contains(log, "300 properties") {
		t.Fatalf("log: %s", log)
	}
}
