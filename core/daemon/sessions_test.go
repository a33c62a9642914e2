package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// TestNoSessionStore: a daemon handed no session continuity boots, and every
// entry point to session continuity (the session API, the agents' session
// tools) answers 501 with why: the build's reason when the wiring gave
// one (not_compiled_in), else that none was handed in (no_sessions).
func TestNoSessionStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		missing  error
		code, in string
	}{
		{"none handed in", nil, codeNoSessions, "none was handed to the daemon"},
		{"left out by the build", plugin.NotCompiledIn("session continuity", "nosqlite"), codeNotCompiledIn, "built with -tags nosqlite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnvWith(t, testConfig(t), testResolver(nil), nil, func(o *Options) { o.Sessions = Sessions{Missing: tc.missing} })
			for _, r := range []struct{ method, url string }{
				{"GET", e.d.httpd.address() + "/projects"},
				{"POST", e.d.httpd.address() + "/approvals/1"},
			} {
				req, _ := http.NewRequest(r.method, r.url, strings.NewReader(`{}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var got struct{ Error, Code string }
				if resp.StatusCode != http.StatusNotImplemented || json.Unmarshal(body, &got) != nil || got.Code != tc.code || !strings.Contains(got.Error, tc.in) {
					t.Errorf("%s %s: %s %s", r.method, r.url, resp.Status, body)
				}
			}
			// The agents' session tools, through the control API.
			_, err := e.client.Session(context.Background(), "master", "approval", json.RawMessage(`{}`))
			var ce *control.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusNotImplemented || ce.Code != tc.code {
				t.Errorf("session tool: %v", err)
			}
		})
	}
}

// fakeLink is a SessionLink that records what the daemon asks of it.
type fakeLink struct {
	mu     sync.Mutex
	calls  []string
	env    SessionEnv
	agents SessionAgents
}

func (f *fakeLink) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeLink) Open(_ context.Context, env SessionEnv, reason string) (int, error) {
	f.env = env
	f.record("open " + reason)
	return 0, nil
}
func (f *fakeLink) Start(a SessionAgents) { f.agents = a; f.record("start") }
func (f *fakeLink) Resumable(context.Context) ([]SessionRef, error) {
	return []SessionRef{{ProjectID: "p", ID: "s"}}, nil
}
func (f *fakeLink) Resume(_ context.Context, s SessionRef) error {
	f.record("resume " + s.ID)
	return nil
}
func (f *fakeLink) StopDispatch()          { f.record("stop dispatch") }
func (f *fakeLink) Close(clean bool) error { f.record(fmt.Sprint("close ", clean)); return nil }
func (f *fakeLink) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /projects", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "[]") })
}
func (f *fakeLink) Tool(_ context.Context, op, caller, master string, body []byte) (any, error) {
	f.record("tool " + op + " " + caller + " " + master)
	if op != "approval" {
		return nil, fmt.Errorf("%w %s", ErrUnknownSessionTool, op)
	}
	return map[string]string{"got": string(body)}, nil
}
func (f *fakeLink) ErrorStatus(error) (int, string) { return 500, "internal" }
func (f *fakeLink) Check(context.Context) ([]string, []string, int64, error) {
	return nil, nil, 1, nil
}

func (f *fakeLink) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TestSessionLink: the daemon opens the link it is handed in boot phase 1
// (a first boot's sessions are taken as crashed ones), starts it with its
// agents once the master is up, resumes what is interrupted when
// sessions.auto_resume is set, serves its routes, hands it the agents'
// session tools (404 for an op it does not know), and stops its
// dispatchers before it closes it cleanly.
func TestSessionLink(t *testing.T) {
	link := &fakeLink{}
	cfg := testConfig(t)
	cfg.Sessions.AutoResume = true
	e := startEnvWith(t, cfg, testResolver(nil), nil, func(o *Options) { o.Sessions = Sessions{Link: link} })
	if link.env.Data != e.d.data {
		t.Errorf("the link was opened on %q, want the data directory %q", link.env.Data, e.d.data)
	}
	if link.agents == nil || link.agents.Master() != "master" {
		t.Fatalf("the link was started without the agents: %v", link.log())
	}
	resp, err := http.Get(e.d.httpd.address() + "/projects")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "[]" {
		t.Errorf("GET /projects: %s %s, want the link's answer", resp.Status, body)
	}
	out, err := e.client.Session(context.Background(), "", "approval", json.RawMessage(`{"x":1}`))
	if err != nil || !strings.Contains(string(out), `{\"x\":1}`) {
		t.Errorf("session tool: %s %v", out, err)
	}
	_, err = e.client.Session(context.Background(), "", "nosuch", json.RawMessage(`{}`))
	var ce *control.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound || ce.Msg != "no session tool nosuch" {
		t.Errorf("an unknown session tool: %v", err)
	}
	e.stop()
	want := []string{"open crash", "start", "resume s", "tool approval  master", "tool nosuch  master", "stop dispatch", "close true"}
	if got := link.log(); !slices.Equal(got, want) {
		t.Errorf("the daemon asked the link %q, want %q", got, want)
	}
}
