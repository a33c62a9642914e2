package design

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// Roles of a template.
const (
	RoleMaster = "master"
	RoleWorker = "worker"
)

// Template is an agent blueprint: everything an agent process is started
// with. It is frozen for the life of the process; a change reaches an agent
// only through a restart.
type Template struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Role    string `json:"role"`
	// Type is what kind of work the agent does (code, asset, review…):
	// session continuity's current_agent_type. Empty: the template's name.
	Type          string        `json:"type,omitempty"`
	Description   string        `json:"description,omitempty"`
	Brain         Brain         `json:"brain"`
	SystemPrompt  string        `json:"system_prompt"`
	Tools         []string      `json:"tools"`
	ContextBudget ContextBudget `json:"context_budget"`
	Storage       string        `json:"storage,omitempty"` // store URL; empty means the host's default
	Memory        string        `json:"memory,omitempty"`  // long-term memory engine URL (fts://, qdrant://); empty means none
	Limits        Limits        `json:"limits"`
	Workers       []string      `json:"workers,omitempty"` // worker templates a master may spawn
	Listeners     []Listener    `json:"listeners,omitempty"`
	// Ephemeral (workers only): the worker's snapshot is deleted once the
	// result of its last task has reached the agent that spawned it.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// UnknownOutcome says what becomes of a task whose non-idempotent tool
	// was interrupted by a crash: "end_task" (the task ends
	// unknown_outcome), "ask_model" (the model is told the outcome is
	// unknown and decides) or "approval" (an operator decides). Empty
	// means ask_model for the openai brain and end_task otherwise.
	UnknownOutcome string `json:"unknown_outcome,omitempty"`
	// HTTPAllowlist lists the URL prefixes the http_get tool may fetch.
	HTTPAllowlist []string `json:"http_allowlist,omitempty"`
	// MCPServers are Model Context Protocol servers whose tools the brain
	// may call, as "{name}__{tool}".
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
}

// Listener is an event source the agent starts after hydration. Kind names
// the listener plugin ("webhook").
type Listener struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`                 // the source's name: in the path, task ids and the log
	Listen    string `json:"listen"`               // host:port
	SecretEnv string `json:"secret_env,omitempty"` // webhook: environment variable holding the HMAC secret
	// ReplayWindow (webhook) is how long a signature is remembered to
	// refuse the same delivery sent again; a Go duration, default 72h.
	ReplayWindow string `json:"replay_window,omitempty"`
	// RequireTimestamp (webhook) refuses deliveries without a signed
	// timestamp.
	RequireTimestamp bool `json:"require_timestamp,omitempty"`
}

// MCPServer is one Model Context Protocol server: a command started as a
// child over stdio, or a streamable-HTTP URL (exactly one of the two).
type MCPServer struct {
	Name      string            `json:"name"`
	Command   []string          `json:"command,omitempty"`
	Env       map[string]string `json:"env,omitempty"` // added to the command's environment
	URL       string            `json:"url,omitempty"`
	TimeoutMs int               `json:"timeout_ms,omitempty"` // per call; 0 means the tool timeout
}

// The values of Template.UnknownOutcome.
const (
	UnknownEndTask  = "end_task"
	UnknownAskModel = "ask_model"
	UnknownApproval = "approval"
)

// UnknownOutcomeOrDefault returns t.UnknownOutcome, or its default for the
// template's brain when empty.
func (t *Template) UnknownOutcomeOrDefault() string {
	if t.UnknownOutcome != "" {
		return t.UnknownOutcome
	}
	if t.Brain.Provider == "openai" {
		return UnknownAskModel
	}
	return UnknownEndTask
}

// Brain selects the model provider.
type Brain struct {
	Provider  string `json:"provider"`              // "echo" or "openai"
	BaseURL   string `json:"base_url,omitempty"`    // openai: server root, e.g. http://127.0.0.1:11434/v1
	Model     string `json:"model,omitempty"`       // openai: model name
	APIKeyEnv string `json:"api_key_env,omitempty"` // openai: environment variable holding the key
	TimeoutMs int    `json:"timeout_ms,omitempty"`  // per request; 0 means 60,000
	// MaxRetries is how many times a 429 or 5xx answer is retried; 0
	// means 4.
	MaxRetries int `json:"max_retries,omitempty"`
	// Stream asks for the answer token by token, reported on the progress
	// topic while it arrives.
	Stream bool `json:"stream,omitempty"`
}

// ContextBudget bounds short_term_history. Messages past the budget fall out
// of the window, oldest first, and are summarised into working variables.
type ContextBudget struct {
	MaxMessages int `json:"max_messages"`
	MaxTokens   int `json:"max_tokens,omitempty"` // approximate (4 bytes a token); 0 means no token bound
}

// Limits bounds what one agent does.
type Limits struct {
	MaxSteps      int `json:"max_steps,omitempty"`       // brain round trips per task; default 8
	MaxTaskBytes  int `json:"max_task_bytes,omitempty"`  // largest accepted task; default 256 KiB
	ToolTimeoutMs int `json:"tool_timeout_ms,omitempty"` // per tool call; default 30,000
	MaxQueue      int `json:"max_queue,omitempty"`       // queued events before new ones are refused; default 10,000
}

// Defaults for zero Limits fields. Those the runtime also applies are
// core/agent's, defined there once.
const (
	DefaultMaxSteps      = agent.DefaultMaxSteps
	DefaultMaxTaskBytes  = 256 << 10
	DefaultToolTimeoutMs = int(agent.DefaultToolTimeout / time.Millisecond)
	DefaultMaxQueue      = agent.DefaultMaxQueue
)

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.MaxTaskBytes <= 0 {
		l.MaxTaskBytes = DefaultMaxTaskBytes
	}
	if l.ToolTimeoutMs <= 0 {
		l.ToolTimeoutMs = DefaultToolTimeoutMs
	}
	if l.MaxQueue <= 0 {
		l.MaxQueue = DefaultMaxQueue
	}
	return l
}

// Decode parses one template strictly: unknown fields and trailing data are
// errors. It does not validate the template's content.
func Decode(data []byte) (*Template, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Template
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTemplate, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the template", ErrInvalidTemplate)
	}
	return &t, nil
}

// Digest returns the sha256 of the template's bytes as "sha256:HEX"; agents
// record it to say exactly which blueprint they run.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
