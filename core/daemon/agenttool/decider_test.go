package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

type fakeSessions struct {
	op  string
	req any
	out string
	err error
}

func (f *fakeSessions) Session(_ context.Context, _, op string, req any) (json.RawMessage, error) {
	f.op, f.req = op, req
	return json.RawMessage(f.out), f.err
}

// TestDecider: the daemon's answers become approval ids and decisions;
// an answer that will not change when asked again wraps agent.ErrNoApproval
// (the task ends unknown_outcome), any other is retried by the kernel.
func TestDecider(t *testing.T) {
	f := &fakeSessions{out: `{"id":4,"status":"pending"}`}
	d := Decider{Service: f}
	id, err := d.Ask(context.Background(), agent.UnknownOutcome{AgentID: "master", TaskID: "task_p1_a_001", Tool: "file_append"})
	if err != nil || id != 4 || f.op != "unknown_outcome" || f.req.(map[string]any)["tool"] != "file_append" {
		t.Fatalf("ask: %d %v %s %+v", id, err, f.op, f.req)
	}
	f.out = `{"id":4,"status":"rejected","feedback":"no","decided_by":"ops"}`
	dec, err := d.Decision(context.Background(), 4)
	if err != nil || dec != (agent.Decision{Status: "rejected", Feedback: "no", DecidedBy: "ops"}) || f.op != "decision" {
		t.Fatalf("decision: %+v %v", dec, err)
	}
	for _, tc := range []struct {
		status    int
		permanent bool
	}{{404, true}, {400, true}, {501, true}, {429, false}, {503, false}, {500, false}} {
		f.err = &control.Error{Status: tc.status, Msg: "x"}
		_, err := d.Decision(context.Background(), 4)
		if errors.Is(err, agent.ErrNoApproval) != tc.permanent {
			t.Errorf("status %d: %v, permanent %v", tc.status, err, tc.permanent)
		}
	}
	f.err, f.out = nil, `{}`
	if _, err := d.Ask(context.Background(), agent.UnknownOutcome{}); err == nil {
		t.Fatal("an answer without an id was taken")
	}
}
