// Package host is the Host of the Host Bootstrapping pattern: it reads a
// frozen blueprint, instantiates the plugins it names (brain, tools, store)
// and hands them to a pure kernel runtime (Start). The kernel never reads
// configuration itself.
//
// Run is the whole life of one agent process (`openstarry run`, and
// `openstarry core` under the daemon): the one-process-per-agent lock is
// taken before anything else starts, the task transport (transport.mqtt)
// and the store come from the plugin registry, and a signal ends it after
// the current tick.
package host

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
	"github.com/openstarry/openstarry-edge/core/tool"
)

// Agent describes one agent to boot.
type Agent struct {
	ID       string
	Template *design.Template
	// Vars are recorded in working_variables at start (template name,
	// version, digest, source).
	Vars       map[string]any
	Store      agent.Store
	DataDir    string
	Outbox     agent.Outbox
	OnProgress func(taskID string, percent int, phase string)
	Services   map[string]any
	Log        zerolog.Logger
	Now        func() time.Time
	BeforeSave func(*agent.Snapshot)
	AfterSave  func(*agent.Snapshot)
	// RetryMin and RetryMax bound the wait while the model server is
	// unreachable (agent.Config); zero means the kernel's defaults.
	RetryMin, RetryMax time.Duration
	// Decider puts the unknown outcome of an interrupted tool of a
	// session's task before an operator (unknown_outcome "approval"); nil
	// when no daemon runs the agent.
	Decider agent.Decider
}

// ToolSource opens the tools of one MCP server for one agent; the closer
// ends the connection (and the server's process) when the agent stops.
type ToolSource func(ctx context.Context, srv design.MCPServer, env ToolSourceEnv) ([]tool.Tool, io.Closer, error)

// ToolSourceEnv is what a ToolSource is given beside the server.
type ToolSourceEnv struct {
	AgentID     string
	ToolTimeout time.Duration
	Log         zerolog.Logger
}

// mcpKind declares the plugin kind mcp: the one client of MCP servers'
// tools (plugin mcp.client).
var mcpKind = registry.DeclareKind(plugin.KindMCP, "host.ToolSource", registry.Is[ToolSource])

// mcpClient is the ID of the MCP tool source.
const mcpClient = string(plugin.KindMCP) + ".client"

// RegisterMCP installs the MCP tool source (transport/mcp does, from init):
// the plugin mcp.client of the one registry. It panics on a second one.
func RegisterMCP(src ToolSource) {
	if _, dup := plugin.Lookup(mcpClient); dup {
		panic("host: MCP tool source registered twice")
	}
	plugin.Register(plugin.Info{ID: mcpClient, Description: "tools of Model Context Protocol servers (stdio command or streamable HTTP)", New: src})
}

// openMCP connects to the template's MCP servers and returns their tools
// and one closer for all of them.
func openMCP(ctx context.Context, a Agent, timeout time.Duration) ([]tool.Tool, func(), error) {
	t := a.Template
	if len(t.MCPServers) == 0 {
		return nil, func() {}, nil
	}
	info, ok := plugin.Lookup(mcpClient)
	if !ok {
		return nil, nil, fmt.Errorf("template %s names MCP servers, but this binary was built without MCP", t.Name)
	}
	var (
		tools   []tool.Tool
		closers []io.Closer
	)
	closeAll := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	for _, srv := range t.MCPServers {
		ts, c, err := info.New.(ToolSource)(ctx, srv, ToolSourceEnv{AgentID: a.ID, ToolTimeout: timeout,
			Log: a.Log.With().Str("agent", a.ID).Str("mcp_server", srv.Name).Logger()})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("template %s: MCP server %s: %w", t.Name, srv.Name, err)
		}
		closers = append(closers, c)
		tools = append(tools, ts...)
	}
	return tools, closeAll, nil
}

// ArtifactsDir is where an agent's file tools write.
func ArtifactsDir(dataDir, agentID string) string {
	return filepath.Join(dataDir, "agents", agentID, "artifacts")
}

// resolveTools returns the tools an agent may call: the registered tools the
// template names, in its order, then its MCP servers' tools. An MCP tool
// hides a registered tool of the same name.
func resolveTools(names []string, mcp []tool.Tool) ([]tool.Tool, error) {
	own := make(map[string]int, len(mcp))
	for i, t := range mcp {
		own[t.Name] = i
	}
	out := make([]tool.Tool, 0, len(names)+len(mcp))
	used := make(map[string]bool, len(mcp))
	for _, n := range names {
		if i, ok := own[n]; ok {
			if !used[n] {
				out = append(out, mcp[i])
				used[n] = true
			}
			continue
		}
		reg, err := tool.Resolve([]string{n})
		if err != nil {
			return nil, err
		}
		out = append(out, reg...)
	}
	for _, t := range mcp {
		if !used[t.Name] {
			out = append(out, t)
			used[t.Name] = true
		}
	}
	return out, nil
}

// warnModelTools logs what of the tools offered to a model is over the
// bounds templates validate enforces (design.ModelToolProblems): MCP
// servers' tools are only known at start, so they are reported, not
// refused.
func warnModelTools(log zerolog.Logger, tools []tool.Tool) {
	defs := make([]design.ModelTool, len(tools))
	for i, t := range tools {
		defs[i] = design.ModelTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	idx, msgs := design.ModelToolProblems(defs)
	for i, m := range msgs {
		ev := log.Warn()
		if idx[i] >= 0 {
			ev = ev.Str("tool", defs[idx[i]].Name)
		}
		ev.Msg("tools with MCP servers' over the model bounds: " + m)
	}
}

// withService returns services with name set to v.
func withService(services map[string]any, name string, v any) map[string]any {
	if services == nil {
		services = map[string]any{}
	}
	services[name] = v
	return services
}

// kernelConfig is the runtime's configuration: the blueprint's settings,
// what the host built from it (brain, tools, services) and what the caller
// passes through.
func kernelConfig(a Agent, b agent.Brain, tools []tool.Tool, services map[string]any) agent.Config {
	t := a.Template
	lim := t.Limits.WithDefaults()
	vars := map[string]any{"template_name": t.Name, "template_version": t.Version}
	maps.Copy(vars, a.Vars)
	return agent.Config{
		AgentID:      a.ID,
		Store:        a.Store,
		Brain:        b,
		SystemPrompt: t.SystemPrompt,
		Tools:        tools,
		MaxMessages:  t.ContextBudget.MaxMessages,
		MaxTokens:    t.ContextBudget.MaxTokens,
		MaxSteps:     lim.MaxSteps,
		MaxQueue:     lim.MaxQueue,
		ToolTimeout:  time.Duration(lim.ToolTimeoutMs) * time.Millisecond,
		ArtifactsDir: ArtifactsDir(a.DataDir, a.ID), // made and opened by agent.Start
		TaskArtifacts: func(projectID, sessionID string) string {
			// The runtime passes only ids of the session formats.
			dir := filepath.Join(a.DataDir, "projects", projectID, "sessions", sessionID, "artifacts")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return ""
			}
			return dir
		},
		Vars:       vars,
		Services:   services,
		Outbox:     a.Outbox,
		OnProgress: a.OnProgress,
		Log:        a.Log,
		Now:        a.Now,
		BeforeSave: a.BeforeSave,
		AfterSave:  a.AfterSave,

		UnknownOutcome: t.UnknownOutcomeOrDefault(),
		Decider:        a.Decider,
		RetryMin:       a.RetryMin,
		RetryMax:       a.RetryMax,
	}
}

// Start builds the agent's brain and runtime from its blueprint and hydrates
// it from its store.
func Start(ctx context.Context, a Agent) (*agent.Runtime, error) {
	if err := agent.ValidateID(a.ID); err != nil {
		return nil, err
	}
	t := a.Template
	b, err := brain.New(t.Brain)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", t.Name, err)
	}
	services := maps.Clone(a.Services)
	var mem memory.Engine
	if t.Memory != "" {
		if mem, err = plugin.OpenMemory(ctx, t.Memory, plugin.Env{DataDir: a.DataDir, Log: a.Log}); err != nil {
			return nil, fmt.Errorf("template %s: %w", t.Name, err)
		}
		services = withService(services, tool.ServiceMemory, mem)
	}
	if len(t.HTTPAllowlist) > 0 {
		services = withService(services, tool.ServiceHTTPAllowlist, slices.Clone(t.HTTPAllowlist))
	}
	lim := t.Limits.WithDefaults()
	extra, closeMCP, err := openMCP(ctx, a, time.Duration(lim.ToolTimeoutMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	tools, err := resolveTools(t.Tools, extra)
	if err != nil {
		closeMCP()
		if mem != nil {
			_ = mem.Close()
		}
		return nil, fmt.Errorf("agent %s: template %s: %w", a.ID, t.Name, err)
	}
	if t.Brain.Provider == "openai" && len(extra) > 0 {
		warnModelTools(a.Log, tools)
	}
	rt, err := agent.Start(ctx, kernelConfig(a, b, tools, services))
	if err != nil {
		closeMCP()
		if mem != nil {
			_ = mem.Close()
		}
		return nil, err
	}
	// Listeners start after hydration, so the first event they take lands
	// in a runtime that has its state.
	var listeners []plugin.Listener
	for _, lc := range t.Listeners {
		l, err := plugin.StartListener(ctx, lc, plugin.ListenerEnv{
			AgentID: a.ID, MaxTaskBytes: lim.MaxTaskBytes, Submit: rt.Submit,
			Log: a.Log.With().Str("listener", lc.Name).Logger(),
			Dir: filepath.Join(a.DataDir, "agents", a.ID, "listeners"),
		})
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			_ = rt.Stop(ctx)
			closeMCP()
			if mem != nil {
				_ = mem.Close()
			}
			return nil, fmt.Errorf("template %s: %w", t.Name, err)
		}
		a.Log.Info().Str("listener", lc.Name).Str("kind", lc.Kind).Msgf("%s listener on %s", lc.Kind, l.Addr())
		listeners = append(listeners, l)
	}
	{
		// Tools run only inside the runtime and listeners only feed it:
		// once it has ended, nothing uses either. Each memory write was
		// committed when it returned, so a process that exits first loses
		// nothing.
		go func() {
			<-rt.Done()
			closeMCP()
			for _, l := range listeners {
				_ = l.Close()
			}
			if mem != nil {
				_ = mem.Close()
			}
		}()
	}
	return rt, nil
}
