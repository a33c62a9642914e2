package agent

import (
	"context"
	"encoding/json"
	"errors"
)

// Brain decides what an agent does with a task: it is asked once per step,
// sees what the tools it called so far returned, and either calls more tools
// or answers. Implementations live outside the kernel (core/brain for the
// built-in echo brain, transport/llm for model servers).
type Brain interface {
	Think(ctx context.Context, turn Turn) (Reply, error)
}

// Quick is implemented by a brain that answers from the turn alone, at once
// and deterministically: it waits on no model server, no network and no
// disk, and asked the same turn again (after a crash) it answers the same.
// The echo brain is one. The runtime then lets a tick run before its event
// is durable, and saves the event, the tools' results and the outcome in one
// commit (see Config.QuickWait); it also skips the save of the brain's reply
// before idempotent calls run, since asking again costs nothing and answers
// the same. A brain that calls a model is never Quick.
type Quick interface {
	Quick() bool
}

// Summarizer is implemented by brains that can fold the messages leaving the
// context window into a short summary kept in working memory. A brain
// without it gets the kernel's mechanical summary (one clipped line per
// message).
type Summarizer interface {
	Summarize(ctx context.Context, previous string, dropped []Message) (string, error)
}

// ErrBrainUnavailable is wrapped by a brain's error when the model server
// cannot be reached at all (connection refused, no route, name not
// resolved). The kernel then keeps the task queued and asks again with
// backoff instead of failing it; any other error fails the task.
var ErrBrainUnavailable = errors.New("model server unreachable")

// Turn is what a brain sees at one step.
type Turn struct {
	AgentID      string
	SystemPrompt string
	History      []Message // the window before this task; do not modify
	// Memory is the summary of the messages that left the window
	// (working_variables.history_summary), empty when none did.
	Memory string
	// Resume is session continuity's resume context, when the task belongs
	// to a session that resumed an interrupted one (the task carries it):
	// what was done, what failed, the approaches verified and failed, the
	// task in progress when it stopped. It is text for a model, at most
	// 8 KiB, its JSON cut so that it stays valid; for a session_summary
	// task, the instruction to write the summary; empty otherwise.
	Resume  string
	Task    Task
	Step    int          // 0 for the first call of this task
	Results []ToolResult // results of every call made so far for this task
	// Steps are the brain's earlier replies of this task with the results
	// of their calls, in order; Results is their results flattened.
	Steps []TurnStep
	Tools []ToolSpec // the tools this agent may call
	// OnTokens, when not nil, is told how many tokens of the answer have
	// arrived so far while a streaming brain is answering.
	OnTokens func(n int)
}

// ToolSpec describes a tool to a brain.
type ToolSpec struct {
	Name        string
	Description string
	Idempotent  bool
	// Parameters is the JSON Schema of the tool's arguments object; nil
	// means any object.
	Parameters json.RawMessage
}

// Reply is a brain's answer at one step: tool calls to run, or, when Calls
// is empty, the task's output.
type Reply struct {
	Calls  []Call
	Output json.RawMessage // the answer as JSON (a JSON string for text)
	Usage  Usage           // tokens this step cost, when the brain knows
}

// Usage counts the tokens of model requests.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + v.PromptTokens, CompletionTokens: u.CompletionTokens + v.CompletionTokens}
}

// Call is one tool call requested by a brain.
type Call struct {
	// ID is the model's identifier of the call, echoed with its result;
	// empty for brains that do not name calls.
	ID   string          `json:"id,omitempty"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
}
