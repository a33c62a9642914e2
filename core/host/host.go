// Package host is the Host of the Host Bootstrapping pattern: it reads a
// frozen blueprint, instantiates the plugins it names (brain, tools, store)
// and hands them to a pure kernel runtime. The kernel never reads
// configuration itself.
package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
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
}

// ArtifactsDir is where an agent's file tools write.
func ArtifactsDir(dataDir, agentID string) string {
	return filepath.Join(dataDir, "agents", agentID, "artifacts")
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
	art := ArtifactsDir(a.DataDir, a.ID)
	if err := os.MkdirAll(art, 0o750); err != nil {
		return nil, fmt.Errorf("artifacts directory: %w", err)
	}
	services := a.Services
	var mem memory.Engine
	if t.Memory != "" {
		if mem, err = plugin.OpenMemory(ctx, t.Memory, plugin.Env{DataDir: a.DataDir, Log: a.Log}); err != nil {
			return nil, fmt.Errorf("template %s: %w", t.Name, err)
		}
		services = make(map[string]any, len(a.Services)+1)
		for k, v := range a.Services {
			services[k] = v
		}
		services[tool.ServiceMemory] = mem
	}
	lim := t.Limits.WithDefaults()
	vars := map[string]any{"template_name": t.Name, "template_version": t.Version}
	for k, v := range a.Vars {
		vars[k] = v
	}
	rt, err := agent.Start(ctx, agent.Config{
		AgentID:      a.ID,
		Store:        a.Store,
		Brain:        b,
		SystemPrompt: t.SystemPrompt,
		Tools:        t.Tools,
		MaxMessages:  t.ContextBudget.MaxMessages,
		MaxTokens:    t.ContextBudget.MaxTokens,
		MaxSteps:     lim.MaxSteps,
		MaxQueue:     lim.MaxQueue,
		ToolTimeout:  time.Duration(lim.ToolTimeoutMs) * time.Millisecond,
		ArtifactsDir: art,
		Vars:         vars,
		Services:     services,
		Outbox:       a.Outbox,
		OnProgress:   a.OnProgress,
		Log:          a.Log,
		Now:          a.Now,
		BeforeSave:   a.BeforeSave,
		AfterSave:    a.AfterSave,
	})
	if err != nil {
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
		})
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			_ = rt.Stop(ctx)
			if mem != nil {
				_ = mem.Close()
			}
			return nil, fmt.Errorf("template %s: %w", t.Name, err)
		}
		a.Log.Info().Str("listener", lc.Name).Str("kind", lc.Kind).Msgf("%s listener on %s", lc.Kind, l.Addr())
		listeners = append(listeners, l)
	}
	if mem != nil || len(listeners) > 0 {
		// Tools run only inside the runtime and listeners only feed it:
		// once it has ended, nothing uses either. Each memory write was
		// committed when it returned, so a process that exits first loses
		// nothing.
		go func() {
			<-rt.Done()
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
