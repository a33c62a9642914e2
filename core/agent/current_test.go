package agent_test

import (
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
