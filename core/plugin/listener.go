package plugin

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
)

// ListenerEnv is what a listener is started with: the agent it feeds and the
// one way in, Submit, which returns once the event is durable in the agent's
// snapshot (or was a duplicate, or was refused). A listener answers its
// source only after Submit returned.
type ListenerEnv struct {
	AgentID      string
	MaxTaskBytes int
	Submit       func(ctx context.Context, ev agent.Event) agent.SubmitResult
	Log          zerolog.Logger
	// Dir is a private directory (0700) the listener may keep state in
	// across restarts, DATA/agents/{id}/listeners; "" keeps nothing.
	Dir string
}

// Listener is a running event source (the plugin kind "listener" of seed
// 004's phase 3: UI or webhook plugins an agent starts after hydration).
type Listener interface {
	// Addr is where it listens, for the log.
	Addr() string
	// Close stops taking events and waits for those in flight.
	Close() error
}

// ListenerOpener starts a listener from its template entry.
type ListenerOpener func(ctx context.Context, cfg design.Listener, env ListenerEnv) (Listener, error)

// StartListener starts the listener plugin named by cfg.Kind.
func StartListener(ctx context.Context, cfg design.Listener, env ListenerEnv) (Listener, error) {
	info, ok := Lookup(string(KindListener) + "." + cfg.Kind)
	if !ok {
		return nil, fmt.Errorf("listener %s: no listener plugin of kind %q (built in: %s)", cfg.Name, cfg.Kind, schemes(KindListener))
	}
	return info.New.(ListenerOpener)(ctx, cfg, env)
}
