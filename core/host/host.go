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
	lim := t.Limits.WithDefaults()
	vars := map[string]any{"template_name": t.Name, "template_version": t.Version}
	for k, v := range a.Vars {
		vars[k] = v
	}
	return agent.Start(ctx, agent.Config{
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
		TaskArtifacts: func(projectID, sessionID string) string {
			// The runtime passes only ids of the session formats.
			dir := filepath.Join(a.DataDir, "projects", projectID, "sessions", sessionID, "artifacts")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return ""
			}
			return dir
		},
		Vars:       vars,
		Services:   a.Services,
		Outbox:     a.Outbox,
		OnProgress: a.OnProgress,
		Log:        a.Log,
		Now:        a.Now,
		BeforeSave: a.BeforeSave,
		AfterSave:  a.AfterSave,
	})
}
