package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// TestControlAPIPermissions: who may read the status, spawn, list, stop
// and restart what, over the real control socket. The operator's token
// may do everything; an agent's token acts as that agent only, and
// agent_manager's actions need the tool in the agent's frozen blueprint and
// the template among its workers (an empty list: nothing).
func TestControlAPIPermissions(t *testing.T) {
	const master = `{"name": "master", "version": "2.0.0", "role": "master", "brain": {"provider": "echo"},
 "system_prompt": "m", "tools": ["agent_manager"], "context_budget": {"max_messages": 10}, "workers": ["worker", "mgrworker"]}`
	const mgrWorker = `{"name": "mgrworker", "version": "1.0.0", "role": "worker", "brain": {"provider": "echo"},
 "system_prompt": "w", "tools": ["agent_manager"], "context_budget": {"max_messages": 10}}`
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": master, "mgrworker": mgrWorker}), nil)
	ctx := context.Background()
	tokenOf := func(id string) string {
		e.l.mu.Lock()
		defer e.l.mu.Unlock()
		for _, spec := range e.l.launches {
			for _, kv := range spec.Env {
				if tok, ok := strings.CutPrefix(kv, control.EnvToken+"="); ok && spec.AgentID == id {
					return tok
				}
			}
		}
		t.Fatalf("no control token in %s's environment", id)
		return ""
	}
	client := func(tok string) *control.Client {
		c, err := control.New(e.client.Addr(), tok)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	op := e.client
	ma := client(tokenOf("master"))
	for _, w := range []struct{ id, tmpl string }{{"w1", "worker"}, {"m1", "mgrworker"}} {
		if _, err := ma.Manage(ctx, "master", control.AgentRequest{Action: control.ActionSpawn, Template: w.tmpl, AgentID: w.id}); err != nil {
			t.Fatalf("spawn %s: %v", w.id, err)
		}
		e.waitState(w.id, control.StateRunning)
	}
	w1, m1 := client(tokenOf("w1")), client(tokenOf("m1"))
	none, wrong := client(""), client("not-a-token")

	status := func(c *control.Client) func() error {
		return func() error { _, err := c.Status(ctx); return err }
	}
	manage := func(c *control.Client, as string, req control.AgentRequest) func() error {
		return func() error { _, err := c.Manage(ctx, as, req); return err }
	}
	spawn := func(tmpl, id string) control.AgentRequest {
		return control.AgentRequest{Action: control.ActionSpawn, Template: tmpl, AgentID: id}
	}
	stop := func(id string) control.AgentRequest {
		return control.AgentRequest{Action: control.ActionStop, AgentID: id}
	}
	list := control.AgentRequest{Action: control.ActionList}
	restart := func(c *control.Client, id string) func() error {
		return func() error { _, err := c.Restart(ctx, id); return err }
	}
	stopAgent := func(c *control.Client, id string) func() error {
		return func() error { _, err := c.Stop(ctx, id); return err }
	}

	// The rows run in order: spawns and stops change what later rows see.
	for _, tc := range []struct {
		name string
		do   func() error
		code string // "" = allowed
	}{
		{"no token: status", status(none), control.CodeUnauthorized},
		{"wrong token: status", status(wrong), control.CodeUnauthorized},
		{"wrong token: spawn", manage(wrong, "master", spawn("worker", "x1")), control.CodeUnauthorized},
		{"operator: status", status(op), ""},
		{"master: status", status(ma), ""},
		{"worker: status", status(w1), ""},

		{"master: spawn one of its workers", manage(ma, "master", spawn("worker", "w2")), ""},
		{"master: spawn in another agent's name", manage(ma, "w1", spawn("worker", "x2")), control.CodeForbidden},
		{"master: spawn a template not among its workers", manage(ma, "master", spawn("echo", "x3")), control.CodeTemplate},
		{"master: spawn a master template", manage(ma, "master", spawn("master", "x4")), control.CodeTemplate},
		{"master: list", manage(ma, "master", list), ""},

		{"worker without agent_manager: spawn", manage(w1, "w1", spawn("worker", "x5")), control.CodeForbidden},
		{"worker without agent_manager: list", manage(w1, "w1", list), control.CodeForbidden},
		{"worker without agent_manager: stop itself", manage(w1, "w1", stop("w1")), control.CodeForbidden},
		{"worker with agent_manager, no workers: spawn", manage(m1, "m1", spawn("worker", "x6")), control.CodeTemplate},
		{"worker with agent_manager: list", manage(m1, "m1", list), ""},
		{"worker with agent_manager: stop a worker it did not spawn", manage(m1, "m1", stop("w2")), control.CodeForbidden},
		{"operator in a worker's name: spawn", manage(op, "w1", spawn("worker", "x7")), control.CodeForbidden},
		{"operator, no requester: spawn", manage(op, "", spawn("worker", "w4")), ""},

		{"master: restart", restart(ma, "master"), control.CodeForbidden},
		{"master: restart its worker", restart(ma, "w2"), control.CodeForbidden},
		{"master: stop its worker by /v1/agents", stopAgent(ma, "w2"), control.CodeForbidden},
		{"worker: restart", restart(w1, "w1"), control.CodeForbidden},
		{"master: stop the master", manage(ma, "master", stop("master")), control.CodeForbidden},
		{"operator: stop the master by agent_manager", manage(op, "master", stop("master")), control.CodeBadRequest},
		{"master: stop an unknown agent", manage(ma, "master", stop("ghost")), control.CodeUnknownAgent},
		{"master: stop its worker", manage(ma, "master", stop("w2")), ""},
		{"operator: restart a worker", restart(op, "w1"), ""},
		{"operator: stop a worker", stopAgent(op, "w4"), ""},
		{"operator: restart an unknown agent", restart(op, "ghost"), control.CodeUnknownAgent},
		{"operator: restart the master", restart(op, "master"), ""},
	} {
		err := tc.do()
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.code != "" && !isCode(err, tc.code):
			t.Errorf("%s: err = %v, want code %s", tc.name, err, tc.code)
		}
	}
	for _, id := range []string{"x1", "x2", "x3", "x4", "x5", "x6", "x7"} {
		if e.d.super.member(id) != nil {
			t.Errorf("refused spawn %s exists", id)
		}
	}
	if e.d.super.member("w2") != nil {
		t.Error("w2 was not stopped")
	}
}
