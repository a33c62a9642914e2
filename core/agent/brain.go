package agent

import (
	"context"
	"encoding/json"
)

// Brain decides what an agent does with a task: it is asked once per step,
// sees what the tools it called so far returned, and either calls more tools
// or answers. Implementations live outside the kernel (core/brain for the
// built-in echo brain, transport/llm for model servers).
type Brain interface {
	Think(ctx context.Context, turn Turn) (Reply, error)
}

// Turn is what a brain sees at one step.
type Turn struct {
	AgentID      string
	SystemPrompt string
	History      []Message // the window before this task; do not modify
	Task         Task
	Step         int          // 0 for the first call of this task
	Results      []ToolResult // results of every call made so far for this task
	Tools        []ToolSpec   // the tools this agent may call
}

// ToolSpec describes a tool to a brain.
type ToolSpec struct {
	Name        string
	Description string
	Idempotent  bool
}

// Reply is a brain's answer at one step: tool calls to run, or, when Calls
// is empty, the task's output.
type Reply struct {
	Calls  []Call
	Output json.RawMessage // the answer as JSON (a JSON string for text)
}

// Call is one tool call requested by a brain.
type Call struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
}
