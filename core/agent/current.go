package agent

import (
	"strings"
	"sync"
	"time"
)

// Current is the task an agent has in hand, for the operator's view
// (`openstarry status`, GET /status, the web UI, the device's telemetry):
// which task, where in it, for how long, and the last sign of life. It is
// the runtime's memory, not the snapshot's: it says what this process is
// doing now.
type Current struct {
	TaskID string `json:"task_id"`
	// Step is the brain's step (0 for the first question), Phase what the
	// step does: "thinking", "tool:NAME", "waiting for model",
	// "waiting for approval N".
	Step  int    `json:"step"`
	Phase string `json:"phase"`
	// Tool is the tool running, while one runs.
	Tool    string `json:"tool,omitempty"`
	Percent int    `json:"progress_percent"`
	// Tokens is how many tokens of the model's answer this step has
	// streamed so far (a streaming brain only).
	Tokens    int       `json:"tokens,omitempty"`
	Started   time.Time `json:"started"`
	ElapsedMs int64     `json:"elapsed_ms"`
	// Updated is the time of the last progress.
	Updated time.Time `json:"updated"`
}

// current holds the runtime's Current; the tick goroutine writes it, any
// goroutine reads it.
type current struct {
	mu  sync.Mutex
	cur *Current
}

func (c *current) begin(taskID string, now time.Time) {
	c.mu.Lock()
	c.cur = &Current{TaskID: taskID, Phase: "starting", Started: now, Updated: now}
	c.mu.Unlock()
}

func (c *current) end() {
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
}

// step records a progress of the task in hand; tokens < 0 leaves the count
// of streamed tokens unchanged (other than a new step, which resets it).
func (c *current) step(taskID string, step, pct int, phase string, tokens int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || c.cur.TaskID != taskID {
		return
	}
	if step != c.cur.Step {
		c.cur.Tokens = 0
	}
	c.cur.Step, c.cur.Percent, c.cur.Phase, c.cur.Updated = step, pct, phase, now
	c.cur.Tool, _ = strings.CutPrefix(phase, "tool:")
	if !strings.HasPrefix(phase, "tool:") {
		c.cur.Tool = ""
	}
	if tokens >= 0 {
		c.cur.Tokens = tokens
	}
}

func (c *current) get(now time.Time) *Current {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	cp := *c.cur
	cp.ElapsedMs = now.Sub(cp.Started).Milliseconds()
	return &cp
}

// Current returns the task the agent is running now, or nil when it runs
// none.
func (r *Runtime) Current() *Current { return r.cur.get(r.cfg.Now()) }
