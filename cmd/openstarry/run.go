package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/agenttool"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/transport/httpapi"
)

// Exit codes of run and core.
const (
	exitFailure = 1 // any error
	exitLocked  = 3 // another process runs this agent
)

// runFlags are the flags of run and core: their own, and those of the
// keys data, store, design.* and mqtt.*.
type runFlags struct {
	agent    string
	template string
	listen   string
	token    string
	keys     *keyFlags
	// daemonChild and hooks are set by `openstarry core` (the daemon's
	// agents), never by flags.
	daemonChild bool
	hooks       coreHooks
}

// coreHooks are what the daemon's agents add to a run: save-latency
// metrics and the routes that serve them.
type coreHooks struct {
	beforeSave, afterSave func(*agent.Snapshot)
	onScrub               func(plugin.ScrubReport, error)
	routes                map[string]http.Handler
	digest                string // of the frozen blueprint (see blueprint)
	source                string // where the daemon resolved it (design.Resolved.Source)
}

func init() {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --agent ID",
		Short: "Run one agent in the foreground, without a daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			warnDeprecatedEnv(cmd.Flags(), logger())
			return runAgent(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", envOr("OPENSTARRY_AGENT", ""), "agent id (env OPENSTARRY_AGENT)")
	fl.StringVar(&f.template, "template", envOr("OPENSTARRY_TEMPLATE", "echo"), "template name or path to a template .json (env OPENSTARRY_TEMPLATE)")
	fl.StringVar(&f.listen, "listen", envOr("OPENSTARRY_LISTEN", "127.0.0.1:7777"), "HTTP listen address; empty disables HTTP (env OPENSTARRY_LISTEN)")
	bindKeyEnv(fl, &f.token, "http.token", "token", "bearer token required for HTTP requests from off loopback")
	f.keys = bindKeys(fl, runKeys...)
	rootCmd.AddCommand(cmd)
}

// runKeys are the configuration keys an agent process takes as flags.
var runKeys = []string{"data", "store", "scrub_interval", "design", "mqtt"}

// openStore opens the store named by url, or the default bbolt store under
// dataDir.
func openStore(ctx context.Context, url, dataDir string) (plugin.Storage, error) {
	return host.OpenStore(ctx, url, dataDir, logger())
}

// lockedExit turns "another process runs this agent" into exit code 3.
func lockedExit(err error) error {
	if host.Locked(err) {
		return exitCode(exitLocked, err)
	}
	return err
}

// runAgent checks the flags and hands the agent's life to host.Run.
func runAgent(ctx context.Context, f runFlags) error {
	survivePipeClose()
	log := logger()
	if f.agent == "" {
		return errors.New("--agent is required")
	}
	if err := agent.ValidateID(f.agent); err != nil {
		return fmt.Errorf("--agent: %w", err)
	}
	if f.listen != "" && f.token == "" && !loopbackAddr(f.listen) {
		return fmt.Errorf("--listen %s is not a loopback address: set --token (or OPENSTARRY_HTTP_TOKEN) so the API is not open to the network", f.listen)
	}
	if f.token != "" && len(f.token) < config.MinTokenLen {
		return fmt.Errorf("--token is too short: at least %d characters are required, it has %d (make one with: openssl rand -hex 16)", config.MinTokenLen, len(f.token))
	}
	cfg, err := f.keys.config()
	if err != nil {
		return err
	}
	// The daemon's per-boot token for this agent's port (its agents); not
	// passed on to what the agent starts (MCP servers).
	localToken := os.Getenv(control.EnvAPIToken)
	os.Unsetenv(control.EnvAPIToken)
	err = host.Run(ctx, host.Options{
		AgentID:  f.agent,
		Template: f.template,
		Resolve: func(ctx context.Context, nameOrFile string) (*design.Resolved, error) {
			// The daemon's agents get the blueprint it froze with its
			// digest: they check the digest and decode the bytes the
			// daemon validated, and compile no schema.
			if f.hooks.digest != "" {
				return design.LoadFrozen(nameOrFile, f.hooks.digest, f.hooks.source)
			}
			return resolveTemplate(ctx, cfg.Design, nameOrFile, cfg.Data)
		},
		Config: cfg,
		Listen: f.listen,
		API: func(rt *agent.Runtime, maxTaskBytes int) http.Handler {
			opts := httpapi.Options{Agents: httpapi.Single{R: rt}, Token: f.token, LocalToken: localToken, MaxTaskBytes: maxTaskBytes, Log: log}
			if f.daemonChild {
				// The daemon's dispatcher hands plan tasks with this
				// agent's control token; nobody else may use their ids.
				opts.PlanToken = os.Getenv(control.EnvToken)
			}
			api := httpapi.New(opts)
			for pattern, h := range f.hooks.routes {
				api.Handle(pattern, h)
			}
			return api
		},
		DaemonChild: f.daemonChild,
		Decider:     unknownDecider(f.daemonChild),
		BeforeSave:  f.hooks.beforeSave,
		AfterSave:   f.hooks.afterSave,
		OnScrub:     f.hooks.onScrub,
		Version:     version,
		Log:         log,
	})
	return lockedExit(mqttHint(err))
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

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
