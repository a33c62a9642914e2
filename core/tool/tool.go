// Package tool owns the tools an agent's brain can call: the Tool type, the
// registry every tool plugin registers into (Register, from init), and the
// built-ins that need nothing but the agent's own directory and memory
// (file_append, file_read, file_write, sleep_ms, the memory tools). Tools that
// talk to the network live in their own packages (core/daemon/agenttool,
// transport/httpget), so that the kernel, which imports this package for
// the Tool type, links no network client.
//
// The registry is read by hosts only: a host resolves a template's tool
// names once (Resolve) and hands the kernel the tools themselves.
//
// Every tool declares whether it is idempotent. The kernel runs an idempotent
// tool again after a crash; before a non-idempotent one runs, it saves a
// pending_action, and a crash between that save and the tick's end turns the
// task into unknown_outcome instead of running the tool twice.
package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// Env is what a tool run sees of its agent.
type Env struct {
	AgentID      string
	TaskID       string
	ArtifactsDir string // the agent's artifacts directory; file tools stay inside it
	// Artifacts is ArtifactsDir opened once for the agent's life; file
	// tools open every path through it. Nil: a tool opens ArtifactsDir
	// for the one call (tests, tools run outside an agent).
	Artifacts *Artifacts
	// ProjectID and SessionID name the project session the task belongs
	// to, when it does (the session tools need them).
	ProjectID, SessionID string
	Log                  zerolog.Logger
	// Services holds host-provided capabilities by name (the daemon's control
	// client for agent_manager, for example). Tools type-assert what they need.
	Services map[string]any
}

// artifacts returns env.Artifacts, or ArtifactsDir opened for one call
// (the caller closes it then).
func (env Env) artifacts() (*Artifacts, error) {
	if env.Artifacts != nil {
		return env.Artifacts, nil
	}
	if env.ArtifactsDir == "" {
		return nil, errors.New("this agent has no artifacts directory")
	}
	return OpenArtifacts(env.ArtifactsDir)
}

// ServiceHTTPAllowlist is the Env.Services key of the http_get allowlist, a
// []string of URL prefixes (the template's http_allowlist). The host sets
// it; the tool itself lives outside the kernel (transport/httpget).
const ServiceHTTPAllowlist = "http_allowlist"

// Tool is one callable capability.
type Tool struct {
	Name        string
	Description string
	Idempotent  bool
	// Parameters is the JSON Schema of the arguments object, shown to
	// models as the function's parameters; nil means any object. Run
	// still checks its arguments itself.
	Parameters json.RawMessage
	// Run executes the call. args is the JSON object the brain passed.
	Run func(ctx context.Context, env Env, args json.RawMessage) (json.RawMessage, error)
}

// ErrUnknownTool is returned by Lookup for a name not in the registry.
var ErrUnknownTool = errors.New("unknown tool")

// toolKind declares the plugin kind tool: the registry holds each Tool itself.
var toolKind = registry.DeclareKind(registry.KindTool, "tool.Tool", registry.Is[Tool])

// Register adds a tool to the one registry (plugin tool.{name}); it panics
// on an empty name, a missing Run, or a duplicate, which are programming
// errors.
func Register(t Tool) {
	if t.Name == "" || t.Run == nil {
		panic(fmt.Sprintf("tool: invalid registration %q", t.Name))
	}
	if _, dup := registry.Lookup(string(registry.KindTool) + "." + t.Name); dup {
		panic(fmt.Sprintf("tool: %q registered twice", t.Name))
	}
	registry.Register(registry.Info{ID: string(registry.KindTool) + "." + t.Name, New: t})
}

// Lookup returns the tool called name.
func Lookup(name string) (Tool, error) {
	info, ok := registry.Lookup(string(registry.KindTool) + "." + name)
	if !ok {
		return Tool{}, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	return info.New.(Tool), nil
}

// Resolve returns the registered tools of the given names, in order, or an
// error wrapping ErrUnknownTool for the first name not registered.
func Resolve(names []string) ([]Tool, error) {
	out := make([]Tool, 0, len(names))
	for _, n := range names {
		t, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// MustResolve is Resolve for names known to be registered (tests, fixed
// sets); it panics on an unknown name.
func MustResolve(names ...string) []Tool {
	ts, err := Resolve(names)
	if err != nil {
		panic("tool: " + err.Error())
	}
	return ts
}

// Known reports whether a tool called name is registered.
func Known(name string) bool {
	_, err := Lookup(name)
	return err == nil
}

// Names returns the registered tool names, sorted.
func Names() []string {
	list := registry.List(registry.KindTool)
	out := make([]string, 0, len(list))
	for _, info := range list {
		out = append(out, info.Name())
	}
	return out
}
