package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/tool"
)

type fakeManager struct {
	requester string
	req       control.AgentRequest
}

func (f *fakeManager) Manage(_ context.Context, requester string, req control.AgentRequest) (json.RawMessage, error) {
	f.requester, f.req = requester, req
	return json.RawMessage(`{"agent_id":"w1"}`), nil
}

func TestAgentManager(t *testing.T) {
	am, err := tool.Lookup("agent_manager")
	if err != nil || am.Idempotent {
		t.Fatalf("agent_manager: %v idempotent=%v", err, am.Idempotent)
	}
	fm := &fakeManager{}
	env := tool.Env{AgentID: "master", Services: map[string]any{ServiceAgentManager: fm}}
	out, err := am.Run(context.Background(), env, json.RawMessage(`{"action":"spawn","template":"worker","task":{"task_id":"a","input":"x"}}`))
	if err != nil || string(out) != `{"agent_id":"w1"}` || fm.requester != "master" || fm.req.Template != "worker" {
		t.Fatalf("%s %v %+v", out, err, fm)
	}
	for args, want := range map[string]string{
		`{"action":"spawn"}`:                           "needs \"template\"",
		`{"action":"stop"}`:                            "needs \"agent_id\"",
		`{"action":"fly"}`:                             "want \"spawn\"",
		`{"action":"spawn","template":"w","task":[1]}`: "task object",
		`{"action":"list","extra":1}`:                  "bad arguments",
	} {
		if _, err := am.Run(context.Background(), env, json.RawMessage(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	t.Setenv(control.EnvAddr, "")
	_, err = am.Run(context.Background(), tool.Env{AgentID: "a"}, json.RawMessage(`{"action":"list"}`))
	if !errors.Is(err, control.ErrNoDaemon) {
		t.Fatalf("without a daemon: %v", err)
	}
}
