package wiring

import (
	"context"
	"net/http"
	"os"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/connpass"
	"github.com/openstarry/openstarry-edge/core/daemon/agenttool"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/metrics"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/transport/httpapi"
)

// Agent is what one agent process runs with: `openstarry run`, or the
// daemon's child, `openstarry core`.
type Agent struct {
	ID       string
	Template string         // a name or a file; the daemon's child: the frozen blueprint file
	Listen   string         // the HTTP API's address; "" serves none
	Token    string         // bearer token required for requests from off loopback
	Config   *config.Config // the keys data, store, scrub_interval, design.* and mqtt.*
	// Child says the daemon spawned this agent (`openstarry core`): it
	// serves its save latencies on GET /metrics, takes plan tasks with the
	// daemon's control token, and puts an unknown outcome before an
	// operator through the daemon's session continuity.
	Child bool
	// Digest is the frozen blueprint's (sha256:HEX): when set, the agent
	// checks it and decodes the bytes the daemon validated instead of
	// resolving and validating Template again. Source is where the daemon
	// resolved it (design.Resolved.Source).
	Digest, Source string
	Version        string
	Log            zerolog.Logger
}

// RunAgent hands the agent's life to host.Run, with the HTTP API on its
// listener, and returns when the agent stopped.
func RunAgent(ctx context.Context, a Agent) error {
	log, cfg := a.Log, a.Config
	// The daemon's per-boot token for this agent's port (its agents); not
	// passed on to what the agent starts (MCP servers).
	localToken := os.Getenv(control.EnvAPIToken)
	os.Unsetenv(control.EnvAPIToken)
	// The daemon's hand-off of client connections (core/connpass), when
	// it gave this process a pair.
	var alsoServe func(api http.Handler, addr string) func(context.Context)
	if a.Child {
		hs, err := connpass.FromEnv()
		if err != nil {
			log.Warn().Err(err).Msg("connection hand-off: off")
		}
		if hs != nil {
			alsoServe = func(api http.Handler, addr string) func(context.Context) {
				stop, err := connpass.Serve(connpass.AgentOptions{Settings: *hs, AgentID: a.ID, LocalToken: localToken,
					API: api, Addr: addr, Log: log})
				if err != nil {
					log.Warn().Err(err).Msg("connection hand-off: off; the daemon forwards this agent's requests")
					return nil
				}
				return stop
			}
		}
	}
	// What the daemon's agents add to a run: save-latency metrics and
	// the route that serves them.
	var beforeSave, afterSave func(*agent.Snapshot)
	var onScrub func(plugin.ScrubReport, error)
	routes := map[string]http.Handler{}
	if a.Child {
		m := metrics.NewAgent(nil)
		beforeSave, afterSave, onScrub = m.BeforeSave, m.AfterSave, m.ObserveScrub
		routes["GET /metrics"] = m
	}
	return host.Run(ctx, host.Options{
		AgentID:  a.ID,
		Template: a.Template,
		Resolve: func(ctx context.Context, nameOrFile string) (*design.Resolved, error) {
			// The daemon's agents get the blueprint it froze with its
			// digest: they check the digest and decode the bytes the
			// daemon validated, and compile no schema.
			if a.Digest != "" {
				return design.LoadFrozen(nameOrFile, a.Digest, a.Source)
			}
			return ResolveTemplate(ctx, cfg.Design, nameOrFile, cfg.Data, log)
		},
		Config: cfg,
		Listen: a.Listen,
		API: func(rt *agent.Runtime, maxTaskBytes int) http.Handler {
			opts := httpapi.Options{Agents: httpapi.Single{R: rt}, Token: a.Token, LocalToken: localToken, MaxTaskBytes: maxTaskBytes, Log: log}
			if a.Child {
				// The daemon's dispatcher hands plan tasks with this
				// agent's control token; nobody else may use their ids.
				opts.PlanToken = os.Getenv(control.EnvToken)
			}
			api := httpapi.New(opts)
			for pattern, h := range routes {
				api.Handle(pattern, h)
			}
			return api
		},
		AlsoServe:   alsoServe,
		DaemonChild: a.Child,
		Decider:     unknownDecider(a.Child),
		BeforeSave:  beforeSave,
		AfterSave:   afterSave,
		OnScrub:     onScrub,
		Version:     a.Version,
		Log:         log,
	})
}

// unknownDecider is how an agent puts an unknown outcome before an operator:
// through the daemon's session continuity for the daemon's agents, nobody
// for `openstarry run`.
func unknownDecider(daemonChild bool) agent.Decider {
	if !daemonChild {
		return nil
	}
	return agenttool.Decider{}
}
