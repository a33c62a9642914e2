package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/internal/wait"
	mcppkg "github.com/openstarry/openstarry-edge/transport/mcp"
)

func toolEnv(t *testing.T) host.ToolSourceEnv {
	return host.ToolSourceEnv{AgentID: "a1", ToolTimeout: 10 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))}
}

func open(t *testing.T, srv design.MCPServer) (map[string]tool.Tool, io.Closer) {
	t.Helper()
	tools, closer, err := mcppkg.Open(context.Background(), srv, toolEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]tool.Tool{}
	for _, tl := range tools {
		byName[tl.Name] = tl
	}
	return byName, closer
}

func run(t *testing.T, tl tool.Tool, args string) (string, error) {
	t.Helper()
	out, err := tl.Run(context.Background(), tool.Env{}, json.RawMessage(args))
	return string(out), err
}

// methodLog records the HTTP methods and Mcp-Session-Id headers a server
// handler received.
type methodLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *methodLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Method+" "+r.Header.Get("Mcp-Session-Id")+" "+r.Header.Get("MCP-Protocol-Version"))
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *methodLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// The SDK's streamable-HTTP server, answering with event streams, with
// plain JSON, and without sessions: tools listed over several pages,
// results, tool errors, structured content, a ping from the server in the
// middle of a call, and the session ended with DELETE on close.
func TestStreamableHTTP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     sdk.StreamableHTTPOptions
		sessions bool
		ping     bool
	}{
		{"events", sdk.StreamableHTTPOptions{}, true, true},
		{"json", sdk.StreamableHTTPOptions{JSONResponse: true}, true, false},
		{"stateless", sdk.StreamableHTTPOptions{Stateless: true}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledger := filepath.Join(t.TempDir(), "ledger.txt")
			server := newServerOpts(ledger, true, false, &sdk.ServerOptions{PageSize: 2})
			var log methodLog
			hs := httptest.NewServer(log.wrap(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, &tc.opts)))
			defer hs.Close()

			tools, closer := open(t, design.MCPServer{Name: "web", URL: hs.URL})
			var names []string
			for n := range tools {
				names = append(names, n)
			}
			slices.Sort(names)
			if want := "web__lookup,web__pinger,web__record,web__slow,web__structured"; strings.Join(names, ",") != want {
				t.Fatalf("tools = %v, want %s", names, want)
			}
			if !tools["web__lookup"].Idempotent || !tools["web__structured"].Idempotent || tools["web__record"].Idempotent {
				t.Fatal("idempotence does not follow the annotations")
			}
			if p := string(tools["web__record"].Parameters); !strings.Contains(p, `"note"`) || !strings.Contains(p, `"type":"object"`) {
				t.Fatalf("record's parameters = %s", p)
			}
			if out, err := run(t, tools["web__lookup"], `{"key":"k1"}`); err != nil || out != `{"content":"value of k1"}` {
				t.Fatalf("lookup = %s, %v", out, err)
			}
			if out, err := run(t, tools["web__record"], `{"note":"over http"}`); err != nil || !strings.Contains(out, "recorded over http") {
				t.Fatalf("record = %s, %v", out, err)
			}
			if data, _ := os.ReadFile(ledger); string(data) != "over http\n" {
				t.Fatalf("ledger = %q", data)
			}
			if _, err := run(t, tools["web__record"], `{"note":""}`); err == nil || err.Error() != "note is empty" {
				t.Fatalf("a tool error came back as %v", err)
			}
			if out, err := run(t, tools["web__structured"], `{}`); err != nil || out != `{"content":"forty-two\n[image content omitted]","structured":{"n":42}}` {
				t.Fatalf("structured = %s, %v", out, err)
			}
			if tc.ping {
				if out, err := run(t, tools["web__pinger"], `{}`); err != nil || !strings.Contains(out, "pong") {
					t.Fatalf("pinger = %s, %v", out, err)
				}
			}
			if err := closer.Close(); err != nil {
				t.Fatal(err)
			}
			seen := log.all()
			if seen[0] != "POST  " { // initialize: no session yet, no version yet
				t.Fatalf("first request = %q", seen[0])
			}
			last := seen[len(seen)-1]
			if tc.sessions {
				if !strings.HasPrefix(last, "DELETE ") || strings.Fields(last)[1] == "" {
					t.Fatalf("the session was not ended with DELETE: %q", seen)
				}
			} else if strings.HasPrefix(last, "DELETE") {
				t.Fatalf("DELETE without a session: %q", seen)
			}
			for _, s := range seen[1:] {
				if !strings.HasSuffix(s, " 2025-11-25") {
					t.Fatalf("a request after initialize without the protocol version: %q", s)
				}
			}
		})
	}
}

// A server over stdio: it may ping the client in a call; a call given up
// is cancelled on the server and the session goes on; a server that dies
// fails its call at once (not at the timeout), and the next call starts it
// again.
func TestStdioLifecycle(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := design.MCPServer{Name: "notes", Command: []string{self, "-test.run=^$"},
		Env: map[string]string{serverEnv: ledger, extraEnv: "1"}, TimeoutMs: 300}
	tools, closer := open(t, srv)
	defer closer.Close()

	if out, err := run(t, tools["notes__pinger"], `{}`); err != nil || !strings.Contains(out, "pong") {
		t.Fatalf("pinger = %s, %v", out, err)
	}
	if _, err := run(t, tools["notes__slow"], `{}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow = %v, want the deadline", err)
	}
	if err := wait.Poll(10*time.Second, func() error {
		_, err := os.Stat(ledger + ".cancelled")
		return err
	}); err != nil {
		t.Fatalf("the server did not see the call cancelled: %v", err)
	}
	if out, err := run(t, tools["notes__lookup"], `{"key":"after"}`); err != nil || !strings.Contains(out, "value of after") {
		t.Fatalf("lookup after a cancelled call = %s, %v", out, err)
	}

	// The server's end, not the 300 ms timeout, fails the call, which is
	// not sent again (the server may have run it).
	first, err := os.ReadFile(ledger + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, tools["notes__crash"], `{}`); err == nil || !strings.Contains(err.Error(), "closed its output (exited)") {
		t.Fatalf("crash = %v", err)
	}
	// The next call starts the server again.
	if out, err := run(t, tools["notes__lookup"], `{"key":"k"}`); err != nil || !strings.Contains(out, "value of k") {
		t.Fatalf("a call after the server died = %s, %v", out, err)
	}
	if second, _ := os.ReadFile(ledger + ".pid"); string(second) == string(first) {
		t.Fatalf("the call after the crash ran in the crashed server's process %s", first)
	}
	if err := closer.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
}

// An HTTP server that restarted no longer knows the session: the call that
// got 404 opens a new session and is sent again, once, and runs once.
func TestStreamableHTTPRestart(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	handler := func() http.Handler {
		server := newServer(ledger, false, false)
		return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	}
	var mu sync.Mutex
	current := handler()
	var log methodLog
	hs := httptest.NewServer(log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := current
		mu.Unlock()
		h.ServeHTTP(w, r)
	})))
	defer hs.Close()
	tools, closer := open(t, design.MCPServer{Name: "web", URL: hs.URL})
	defer closer.Close()
	if _, err := run(t, tools["web__record"], `{"note":"one"}`); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	current = handler() // the restart: every session is forgotten
	mu.Unlock()
	if out, err := run(t, tools["web__record"], `{"note":"two"}`); err != nil || !strings.Contains(out, "recorded two") {
		t.Fatalf("record after the restart = %s, %v", out, err)
	}
	if data, _ := os.ReadFile(ledger); string(data) != "one\ntwo\n" {
		t.Fatalf("ledger = %q, want each note once", data)
	}
	sessions := map[string]bool{}
	for _, s := range log.all() {
		if f := strings.Fields(s); len(f) > 1 && f[0] == "POST" {
			sessions[f[1]] = true
		}
	}
	if len(sessions) != 2 {
		t.Fatalf("sessions used = %v, want two", sessions)
	}
}

// What a server must not be able to do: answer with something that is not
// JSON-RPC, speak a protocol version this client does not, fail with an
// HTTP error, or not exist. Each is a clear error from Open.
func TestConnectErrors(t *testing.T) {
	answer := func(body string, status int, ctype string) string {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	for _, tc := range []struct {
		name string
		srv  design.MCPServer
		want string
	}{
		{"no such command", design.MCPServer{Name: "x", Command: []string{filepath.Join(t.TempDir(), "missing")}}, "no such file"},
		{"not json-rpc", design.MCPServer{Name: "x", URL: answer(`{"hello":1}`, 200, "application/json")}, "jsonrpc is"},
		{"not json", design.MCPServer{Name: "x", URL: answer(`<html>`, 200, "application/json")}, "bad message"},
		{"old version", design.MCPServer{Name: "x", URL: answer(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2023-01-01"}}`, 200, "application/json")}, `"2023-01-01"`},
		{"http error", design.MCPServer{Name: "x", URL: answer(`no`, 503, "text/plain")}, "503"},
		{"no response in the stream", design.MCPServer{Name: "x", URL: answer("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n", 200, "text/event-stream")}, "without a response"},
		{"rpc error", design.MCPServer{Name: "x", URL: answer(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"not today"}}`, 200, "application/json")}, "MCP error -32000: not today"},
		{"html", design.MCPServer{Name: "x", URL: answer(`<html>`, 200, "text/html")}, "content type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := mcppkg.Open(context.Background(), tc.srv, toolEnv(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// Calls from several goroutines at once each get their own answer, over
// both transports.
func TestConcurrentCalls(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	server := newServer(ledger, false, false)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil))
	defer hs.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []design.MCPServer{
		{Name: "web", URL: hs.URL},
		{Name: "cmd", Command: []string{self, "-test.run=^$"}, Env: map[string]string{serverEnv: ledger}},
	} {
		t.Run(srv.Name, func(t *testing.T) {
			tools, closer := open(t, srv)
			defer closer.Close()
			lookup := tools[srv.Name+"__lookup"]
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("k%d", i)
					out, err := lookup.Run(context.Background(), tool.Env{}, json.RawMessage(`{"key":"`+key+`"}`))
					if err != nil || string(out) != `{"content":"value of `+key+`"}` {
						errs <- fmt.Errorf("%s: %s, %v", key, out, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
