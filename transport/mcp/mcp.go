// Package mcp gives an agent's brain the tools of Model Context Protocol
// servers named in its template, through the official Go SDK: a command
// started as a child over stdio, or a streamable-HTTP URL. Tools are named
// "{server}__{tool}". A tool's annotations decide its crash semantics:
// readOnlyHint or idempotentHint true makes it idempotent (run again after a
// crash); anything else is non-idempotent (a pending_action first, an
// unknown outcome after a crash).
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/tool"
)

func init() {
	plugin.Register(plugin.Info{ID: "tool.mcp", Description: "tools of Model Context Protocol servers (stdio command or streamable HTTP)"})
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
	var tr sdk.Transport
	switch {
	case len(srv.Command) > 0:
		cmd := exec.Command(srv.Command[0], srv.Command[1:]...)
		cmd.Env = os.Environ()
		keys := make([]string, 0, len(srv.Env))
		for k := range srv.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			cmd.Env = append(cmd.Env, k+"="+srv.Env[k])
		}
		cmd.Stderr = logWriter{env}
		tr = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	case srv.URL != "":
		tr = &sdk.StreamableClientTransport{Endpoint: srv.URL}
	default:
		return nil, nil, errors.New("neither command nor url")
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "openstarry", Version: "1"}, nil)
	cs, err := client.Connect(cctx, tr, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	var tools []tool.Tool
	for t, err := range cs.Tools(cctx, nil) {
		if err != nil {
			_ = cs.Close()
			return nil, nil, fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, wrap(cs, srv, t, env))
	}
	env.Log.Info().Int("tools", len(tools)).Msgf("MCP server %s connected with %d tools", srv.Name, len(tools))
	return tools, cs, nil
}

// Idempotent reports whether a tool with these annotations may run again
// after a crash.
func Idempotent(a *sdk.ToolAnnotations) bool {
	return a != nil && (a.ReadOnlyHint || a.IdempotentHint)
}

func wrap(cs *sdk.ClientSession, srv design.MCPServer, t *sdk.Tool, env host.ToolSourceEnv) tool.Tool {
	name := srv.Name + "__" + unsafeName.ReplaceAllString(t.Name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	params, err := json.Marshal(t.InputSchema)
	if err != nil || string(params) == "null" {
		params = nil
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
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: remote, Arguments: args})
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
			if res.StructuredContent != nil {
				out["structured"] = res.StructuredContent
			}
			return json.Marshal(out)
		}}
}

// contentText joins the text parts of a result; other parts are named.
func contentText(cs []sdk.Content) string {
	var parts []string
	for _, c := range cs {
		switch v := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, v.Text)
		default:
			parts = append(parts, fmt.Sprintf("[%T content omitted]", c))
		}
	}
	s := strings.Join(parts, "\n")
	if len(s) > maxOutput {
		s = s[:maxOutput] + "…"
	}
	return s
}

// logWriter puts a server's stderr lines into the agent's log.
type logWriter struct{ env host.ToolSourceEnv }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.env.Log.Info().Str("stderr", line).Msg("MCP server")
		}
	}
	return len(p), nil
}
