package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/wiring"
	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Exit codes of run and core.
const (
	exitFailure = exitcode.Failure // any error
	exitLocked  = exitcode.Locked  // another process runs this agent
)

// runFlags are the flags of run and core: their own, and those of the
// keys data, store, design.* and mqtt.*.
type runFlags struct {
	agent    string
	template string
	listen   string
	token    string
	keys     *keyFlags
	// daemonChild, digest and source are set by `openstarry core` (the
	// daemon's agents; see wiring.Agent), never by run's flags.
	daemonChild    bool
	digest, source string
}

func newRunCmd(g *globals) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --agent ID",
		Short: "Run one agent in the foreground, without a daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			warnDeprecatedEnv(cmd.Flags(), log)
			return runAgent(cmd.Context(), f, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", envOr("OPENSTARRY_AGENT", ""), "agent id (env OPENSTARRY_AGENT)")
	fl.StringVar(&f.template, "template", envOr("OPENSTARRY_TEMPLATE", "echo"), "template name or path to a template .json (env OPENSTARRY_TEMPLATE)")
	fl.StringVar(&f.listen, "listen", envOr("OPENSTARRY_LISTEN", "127.0.0.1:7777"), "HTTP listen address; empty disables HTTP (env OPENSTARRY_LISTEN)")
	bindKeyEnv(fl, &f.token, "http.token", "token", "bearer token required for HTTP requests from off loopback")
	f.keys = bindKeys(fl, runKeys...)
	return cmd
}

// runKeys are the configuration keys an agent process takes as flags.
var runKeys = []string{"data", "store", "scrub_interval", "design", "mqtt"}

// openStore opens the store named by url, or the default bbolt store under
// dataDir.
func openStore(ctx context.Context, url, dataDir string, log zerolog.Logger) (plugin.Storage, error) {
	return host.OpenStore(ctx, url, dataDir, log)
}

// lockedExit turns "another process runs this agent" into exit code 3.
func lockedExit(err error) error {
	if host.Locked(err) {
		return exitCode(exitLocked, err)
	}
	return err
}

// runAgent checks the flags and runs the agent (wiring.RunAgent).
func runAgent(ctx context.Context, f runFlags, log zerolog.Logger) error {
	survivePipeClose()
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
	err = wiring.RunAgent(ctx, wiring.Agent{ID: f.agent, Template: f.template, Listen: f.listen, Token: f.token, Config: cfg,
		Child: f.daemonChild, Digest: f.digest, Source: f.source, Version: version, Log: log})
	return lockedExit(mqttHint(err))
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
