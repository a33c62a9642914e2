package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/session"
)

// TestNoSessionStore: a daemon handed no session store boots, and every
// entry point to session continuity (the session API, the agents' session
// tools) answers 501 with why: the build's reason when the wiring gave
// one (not_compiled_in), else that none was handed in (no_sessions).
func TestNoSessionStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		missing  error
		code, in string
	}{
		{"no store handed in", nil, codeNoSessions, "no session store was handed to the daemon"},
		{"left out by the build", plugin.NotCompiledIn("session continuity", "nosqlite"), codeNotCompiledIn, "built with -tags nosqlite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnvWith(t, testConfig(t), testResolver(nil), nil, func(o *Options) { o.Sessions = Sessions{Missing: tc.missing} })
			for _, r := range []struct{ method, url string }{
				{"GET", e.d.httpd.addr + "/projects"},
				{"POST", e.d.httpd.addr + "/approvals/1"},
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

// TestSessionsNeedRoutes: a store without the session API is refused at
// start: a missing piece is an error, never a silent default.
func TestSessionsNeedRoutes(t *testing.T) {
	open := func(context.Context, string) (session.Store, error) { return nil, errors.New("not opened") }
	_, err := newDaemon(Options{Config: testConfig(t), Resolver: testResolver(nil), Sessions: Sessions{Store: open}})
	if err == nil || !strings.Contains(err.Error(), "no Routes") {
		t.Fatalf("newDaemon with a store and no routes: %v", err)
	}
}
