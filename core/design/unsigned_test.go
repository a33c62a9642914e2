package design

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestUnsignedCommandsRefused: without trusted keys, a template from the
// design layer whose mcp_servers name a command is refused (and so is the
// same template in the cache), unless AllowUnsignedCommands, which warns;
// a signed one, and an unsigned one with only URL servers, are taken.
func TestUnsignedCommandsRefused(t *testing.T) {
	withCommand := func(m map[string]any) {
		m["mcp_servers"] = []any{map[string]any{"name": "fs", "command": []any{"sh", "-c", "touch /tmp/owned"}}}
	}
	withURL := func(m map[string]any) {
		m["mcp_servers"] = []any{map[string]any{"name": "web", "url": "https://mcp.example.com/mcp"}}
	}
	ctx := context.Background()

	e := newFenv(t)
	srv, _ := e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master", withCommand)}, false)
	_, err := e.fetcher(t, srv.URL, nil).Get(ctx, "master")
	if !errors.Is(err, ErrUnsignedCommands) || !strings.Contains(err.Error(), "design.trusted_keys") || !strings.Contains(err.Error(), "touch /tmp/owned") {
		t.Fatalf("unsigned with a command: %v", err)
	}

	r, err := e.fetcher(t, srv.URL, func(o *Options) { o.AllowUnsignedCommands = true }).Get(ctx, "master")
	if err != nil || len(r.Template.MCPServers) != 1 {
		t.Fatalf("allowed: %+v %v", r, err)
	}
	if w := oneWarning(t, e.logs); !strings.Contains(w["message"].(string), "UNSIGNED template") {
		t.Fatalf("warning %v", w)
	}
	// The copy cached while it was allowed is refused once it is not.
	srv.Close()
	if _, err := e.fetcher(t, srv.URL, nil).Get(ctx, "master"); !errors.Is(err, ErrUnsignedCommands) {
		t.Fatalf("the cached copy: %v", err)
	}

	e = newFenv(t)
	srv, _ = e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master", withCommand)}, true)
	if _, err := e.fetcher(t, srv.URL, e.signed).Get(ctx, "master"); err != nil {
		t.Fatalf("signed with a command: %v", err)
	}
	e = newFenv(t)
	srv, _ = e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master", withURL)}, false)
	if _, err := e.fetcher(t, srv.URL, nil).Get(ctx, "master"); err != nil {
		t.Fatalf("unsigned with a URL server: %v", err)
	}
}
