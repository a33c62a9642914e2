package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	_ "github.com/openstarry/openstarry-edge/transport/llm"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
	mcppkg "github.com/openstarry/openstarry-edge/transport/mcp"
)

// The test binary is also the MCP server: run with serverEnv set, it serves
// two tools over stdio with the SDK and exits when its stdin ends.
const serverEnv = "OPENSTARRY_TEST_MCP_SERVER"

func TestMain(m *testing.M) {
	if out := os.Getenv(serverEnv); out != "" {
		serve(out)
		return
	}
	os.Exit(m.Run())
}

type noteArgs struct {
	Note string `json:"note" jsonschema:"the line to record"`
}

type lookupArgs struct {
	Key string `json:"key"`
}

// extraEnv adds the tools the client tests use (structured, pinger, slow,
// crash) to the stdio server, and makes it write its process id to
// {ledger}.pid.
const extraEnv = "OPENSTARRY_TEST_MCP_EXTRA"

// lingerEnv keeps the stdio server running for a minute after its stdin
// ended, as a server that ignores the end of its input would.
const lingerEnv = "OPENSTARRY_TEST_MCP_LINGER"

func serve(out string) {
	extra := os.Getenv(extraEnv) != ""
	if extra {
		_ = os.WriteFile(out+".pid", []byte(strconv.Itoa(os.Getpid())), 0o600)
	}
	if err := newServer(out, extra, extra).Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcp test server:", err)
		os.Exit(1)
	}
	if os.Getenv(lingerEnv) != "" {
		time.Sleep(time.Minute)
	}
}

// newServer is the SDK's server with the tools record and lookup; extra
// adds structured, pinger and slow, crash adds a tool that ends the process.
func newServer(out string, extra, crash bool) *sdk.Server {
	return newServerOpts(out, extra, crash, nil)
}

func newServerOpts(out string, extra, crash bool, opts *sdk.ServerOptions) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1.0.0"}, opts)
	sdk.AddTool(s, &sdk.Tool{Name: "record", Description: "Append a note to the ledger."},
		func(ctx context.Context, req *sdk.CallToolRequest, in noteArgs) (*sdk.CallToolResult, any, error) {
			if in.Note == "" {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "note is empty"}}}, nil, nil
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return nil, nil, err
			}
			defer f.Close()
			fmt.Fprintln(f, in.Note)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "recorded " + in.Note}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "lookup", Description: "Look a key up.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, in lookupArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "value of " + in.Key}}}, nil, nil
		})
	if extra {
		sdk.AddTool(s, &sdk.Tool{Name: "structured", Description: "Answer with structured content.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
			func(ctx context.Context, req *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, map[string]any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "forty-two"}, &sdk.ImageContent{Data: []byte{1}, MIMEType: "image/png"}}},
					map[string]any{"n": 42}, nil
			})
		sdk.AddTool(s, &sdk.Tool{Name: "pinger", Description: "Ping the client, then answer."},
			func(ctx context.Context, req *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
				if err := req.Session.Ping(ctx, nil); err != nil {
					return nil, nil, fmt.Errorf("ping: %w", err)
				}
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil, nil
			})
		sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Wait until cancelled."},
			func(ctx context.Context, req *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
				<-ctx.Done()
				_ = os.WriteFile(out+".cancelled", []byte(ctx.Err().Error()), 0o600)
				return nil, nil, ctx.Err()
			})
	}
	if crash {
		sdk.AddTool(s, &sdk.Tool{Name: "crash", Description: "End the server process."},
			func(ctx context.Context, req *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
				os.Exit(3)
				return nil, nil, nil
			})
	}
	return s
}

// A model calls a read-only and a non-idempotent tool of a real MCP server
// process: both run in that process, the results reach the model, and only
// the non-idempotent one gets a pending_action first.
func TestMCPToolsFromChildProcess(t *testing.T) {
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.txt")
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		switch req.Body.ToolResults() {
		case 0:
			return llmtest.Answer{Body: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"notes__lookup","arguments":"{\"key\":\"k1\"}"}},` +
				`{"id":"c2","type":"function","function":{"name":"notes__record","arguments":"{\"note\":\"hello ledger\"}"}},` +
				`{"id":"c3","type":"function","function":{"name":"notes__record","arguments":"{\"note\":\"\"}"}}]}}]}`}
		default:
			return llmtest.Answer{Body: `{"choices":[{"index":0,"message":{"role":"assistant","content":"noted"}}]}`}
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &design.Template{Name: "mcp", Version: "1.0.0", Role: design.RoleWorker,
		Brain: design.Brain{Provider: "openai", BaseURL: srv.BaseURL(), Model: "m"},
		Tools: []string{}, ContextBudget: design.ContextBudget{MaxMessages: 50},
		MCPServers: []design.MCPServer{{Name: "notes", Command: []string{self, "-test.run=^$"},
			Env: map[string]string{serverEnv: ledger}}}}
	if err := (design.Validator{}).CheckTemplate("mcp", tmpl); err != nil {
		t.Fatal(err)
	}
	st, err := bbolt.Open(filepath.Join(dir, "agents"), bbolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	var pending []string
	rt, err := host.Start(context.Background(), host.Agent{ID: "a1", Template: tmpl, Store: st, DataDir: dir,
		Log: zerolog.New(zerolog.NewTestWriter(t)),
		AfterSave: func(s *agent.Snapshot) {
			if s.PendingAction != nil {
				mu.Lock()
				pending = append(pending, s.PendingAction.Tool+string(s.PendingAction.Args))
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := agent.TaskEvent(&agent.Task{TaskID: "t1", Input: json.RawMessage(`"note it"`)}, "test", 0)
	if res := rt.Submit(context.Background(), ev); res.Err != nil {
		t.Fatal(res.Err)
	}
	var state agent.TaskState
	_ = wait.Poll(20*time.Second, func() error { // state is checked below
		state, _, _ = rt.TaskState(context.Background(), "t1")
		if state.Status == agent.ResultDone || state.Status == agent.ResultFailed {
			return nil
		}
		return errors.New(state.Status)
	})
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if state.Status != agent.ResultDone || string(state.Output) != `"noted"` {
		t.Fatalf("state = %+v", state)
	}
	if data, _ := os.ReadFile(ledger); string(data) != "hello ledger\n" {
		t.Fatalf("ledger = %q", data)
	}
	reqs := srv.Requests()
	var tools []string
	for _, d := range reqs[0].Body.Tools {
		tools = append(tools, d.Function.Name)
	}
	if strings.Join(tools, ",") != "notes__lookup,notes__record" || !strings.Contains(string(reqs[0].Body.Tools[1].Function.Parameters), `"note"`) {
		t.Fatalf("tools offered = %v %s", tools, reqs[0].Raw)
	}
	var results []string
	for _, m := range reqs[1].Body.Messages {
		if m.Role == "tool" {
			results = append(results, *m.Content)
		}
	}
	if len(results) != 3 || !strings.Contains(results[0], "value of k1") || !strings.Contains(results[1], "recorded hello ledger") ||
		!strings.Contains(results[2], "error: note is empty") {
		t.Fatalf("results the model saw = %q", results)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pending) == 0 || !strings.HasPrefix(pending[0], "notes__record") {
		t.Fatalf("pending actions saved = %v", pending)
	}
	for _, p := range pending {
		if strings.HasPrefix(p, "notes__lookup") {
			t.Fatalf("a read-only tool got a pending action: %v", pending)
		}
	}
}

func TestIdempotentFromAnnotations(t *testing.T) {
	cases := []struct {
		a    *mcppkg.Annotations
		want bool
	}{
		{nil, false},
		{&mcppkg.Annotations{}, false},
		{&mcppkg.Annotations{ReadOnlyHint: true}, true},
		{&mcppkg.Annotations{IdempotentHint: true}, true},
	}
	for i, tc := range cases {
		if got := mcppkg.Idempotent(tc.a); got != tc.want {
			t.Errorf("case %d: %v, want %v", i, got, tc.want)
		}
	}
}
