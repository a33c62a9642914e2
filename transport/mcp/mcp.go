// Package mcp gives an agent's brain the tools of Model Context Protocol
// servers named in its template: a command started as a child over stdio,
// or a streamable-HTTP URL. Tools are named "{server}__{tool}". A tool's
// annotations decide its crash semantics: readOnlyHint or idempotentHint
// true makes it idempotent (run again after a crash); anything else is
// non-idempotent (a pending_action first, an unknown outcome after a
// crash).
//
// The client is this package's own: the JSON-RPC requests an agent needs
// (initialize, tools/list, tools/call), pings from the server and
// cancellation (session.go), both transports (stdio.go, http.go), and a new
// session when the server ended the last one (client.go). The official
// Go SDK, which the tests run as the server, is not linked into the
// binary: its packages (29, encoding/gob and a JSON Schema implementation
// among them) initialise at the start of every process of the binary, and
// cost each idle agent 2.0 MiB of resident memory (17.1 against 15.1 MiB,
// BenchmarkDaemonBoot with -tags no_mcp) and the binary 1.7 MB, for three
// requests.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/tool"
)

func init() {
	host.RegisterMCP(Open)
}

// connectTimeout bounds starting a server and listing its tools.
const connectTimeout = 30 * time.Second

// maxOutput bounds the text of one tool result handed to the brain.
const maxOutput = 64 << 10

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// Open connects to one server and returns its tools. The closer ends the
// session; for a command it closes the child's stdin and reaps it.
func Open(ctx context.Context, srv design.MCPServer, env host.ToolSourceEnv) ([]tool.Tool, io.Closer, error) {
	c := &client{srv: srv, log: env.Log}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s, err := c.connect(cctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	c.cur = s
	list, err := s.listTools(cctx)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("list tools: %w", err)
	}
	tools := make([]tool.Tool, 0, len(list))
	for _, t := range list {
		tools = append(tools, wrap(c, srv, t, env))
	}
	env.Log.Info().Int("tools", len(tools)).Msgf("MCP server %s connected with %d tools", srv.Name, len(tools))
	return tools, c, nil
}

// Idempotent reports whether a tool with these annotations may run again
// after a crash.
func Idempotent(a *Annotations) bool {
	return a != nil && (a.ReadOnlyHint || a.IdempotentHint)
}

func wrap(c *client, srv design.MCPServer, t remoteTool, env host.ToolSourceEnv) tool.Tool {
	name := srv.Name + "__" + unsafeName.ReplaceAllString(t.Name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	idem := Idempotent(t.Annotations)
	desc := t.Description
	if desc == "" {
		desc = "Tool " + t.Name + " of the MCP server " + srv.Name + "."
	}
	timeout := env.ToolTimeout
	if srv.TimeoutMs > 0 {
		timeout = time.Duration(srv.TimeoutMs) * time.Millisecond
	}
	remote := t.Name
	params, dropped := normalizeSchema(schemaObject(t.InputSchema))
	if len(dropped) > 0 {
		env.Log.Warn().Str("tool", name).Strs("dropped", dropped).
			Msgf("MCP tool %s: schema keywords that grammar-driven model servers refuse were dropped", name)
	}
	return tool.Tool{Name: name, Description: desc, Idempotent: idem, Parameters: params,
		Run: func(ctx context.Context, _ tool.Env, raw json.RawMessage) (json.RawMessage, error) {
			var args map[string]any
			if len(raw) > 0 && string(raw) != "null" {
				if err := json.Unmarshal(raw, &args); err != nil {
					return nil, fmt.Errorf("bad arguments: %v", err)
				}
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			res, err := c.callTool(ctx, remote, args)
			if err != nil {
				return nil, fmt.Errorf("MCP server %s: %w", srv.Name, err)
			}
			text := contentText(res.Content)
			if res.IsError {
				if text == "" {
					text = "the tool reported an error"
				}
				return nil, errors.New(text)
			}
			out := map[string]any{"content": text}
			if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
				out["structured"] = res.StructuredContent
			}
			return json.Marshal(out)
		}}
}

// schemaObject is a tool's input schema, compacted, for the brain; nil when
// the server gave none or something other than a JSON object.
func schemaObject(raw json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return out
}

// contentText joins the text parts of a result; other parts are named.
func contentText(cs []content) string {
	var parts []string
	for _, c := range cs {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		} else {
			parts = append(parts, "["+c.Type+" content omitted]")
		}
	}
	s := strings.Join(parts, "\n")
	if len(s) > maxOutput {
		s = s[:maxOutput] + "…"
	}
	return s
}

// logWriter puts a server's stderr lines into the agent's log.
type logWriter struct{ log zerolog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.log.Info().Str("stderr", line).Msg("MCP server")
		}
	}
	return len(p), nil
}
