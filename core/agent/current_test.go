package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestCurrent: while a task runs, the runtime tells which task, its step and
// tool, how long it has run and when it last progressed; idle, nothing.
func TestCurrent(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	if c := rt.Current(); c != nil {
		t.Fatalf("idle agent has a current task: %+v", c)
	}
	submit(t, rt, "slow", map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": 1500}}}})
	var c *agent.Current
	wait.For(t, 10*time.Second, "the task in hand", func() bool {
		c = rt.Current()
		return c != nil && c.Tool == "sleep_ms"
	})
	if c.TaskID != "slow" || c.Phase != "tool:sleep_ms" || c.Step != 0 || c.Started.IsZero() || c.Updated.Before(c.Started) {
		t.Fatalf("current %+v", c)
	}
	wait.For(t, 10*time.Second, "elapsed time growing", func() bool {
		d := rt.Current()
		return d != nil && d.ElapsedMs > c.ElapsedMs
	})
	waitTask(t, rt, "slow")
	if c := rt.Current(); c != nil {
		t.Fatalf("a finished task is still current: %+v", c)
	}
}

// streamingBrain reports tokens as a streaming model does, then waits to
// be released before it answers.
type streamingBrain struct{ release chan struct{} }

func (b streamingBrain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	if turn.OnTokens != nil {
		turn.OnTokens(17)
		turn.OnTokens(42)
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return agent.Reply{}, ctx.Err()
	}
	return agent.Reply{Output: json.RawMessage(`"answered"`)}, nil
}

// TestCurrentTokens: while a model streams its answer, the task in hand
// says "thinking" and how many tokens have arrived, even with nobody
// listening to progress (no MQTT).
func TestCurrentTokens(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	e.cfg.Brain = streamingBrain{release: release}
	rt := e.start()
	submit(t, rt, "model-1", "stream please")
	var c *agent.Current
	wait.For(t, 10*time.Second, "the streamed tokens in the task in hand", func() bool {
		c = rt.Current()
		return c != nil && c.Tokens == 42
	})
	if c.TaskID != "model-1" || c.Phase != "thinking" || c.Tool != "" || c.Step != 0 {
		t.Fatalf("current %+v", c)
	}
	close(release)
	if st := waitTask(t, rt, "model-1"); st.Status != agent.ResultDone {
		t.Fatalf("task %+v", st)
	}
}
