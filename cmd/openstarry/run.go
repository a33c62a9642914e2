package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/transport/httpapi"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// Exit codes of run and core.
const (
	exitFailure = 1 // any error
	exitLocked  = 3 // another process runs this agent
)

type runFlags struct {
	agent    string
	template string
	data     string
	store    string
	listen   string
	token    string
	design   designFlags
	mqtt     mqttFlags
	// hooks are set by `openstarry core` (the daemon's agents), never by flags.
	hooks coreHooks
}

// coreHooks are what the daemon's agents add to a run: save-latency
// metrics and the routes that serve them.
type coreHooks struct {
	beforeSave, afterSave func(*agent.Snapshot)
	routes                map[string]http.Handler
	digest                string // of the frozen blueprint (see blueprint)
}

func init() {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --agent ID",
		Short: "Run one agent in the foreground, without a daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", envOr("OPENSTARRY_AGENT", ""), "agent id (env OPENSTARRY_AGENT)")
	fl.StringVar(&f.template, "template", envOr("OPENSTARRY_TEMPLATE", "echo"), "template name or path to a template .json (env OPENSTARRY_TEMPLATE)")
	fl.StringVar(&f.data, "data", envOr("OPENSTARRY_DATA", "./data"), "data directory (env OPENSTARRY_DATA)")
	fl.StringVar(&f.store, "store", envOr("OPENSTARRY_STORE", ""), "snapshot store URL; default the template's, else bbolt:// under the data directory (env OPENSTARRY_STORE)")
	fl.StringVar(&f.listen, "listen", envOr("OPENSTARRY_LISTEN", "127.0.0.1:7777"), "HTTP listen address; empty disables HTTP (env OPENSTARRY_LISTEN)")
	fl.StringVar(&f.token, "token", envOr("OPENSTARRY_API_TOKEN", ""), "bearer token required for HTTP requests from off loopback (env OPENSTARRY_API_TOKEN)")
	f.design.bind(fl)
	f.mqtt.bind(fl)
	rootCmd.AddCommand(cmd)
}

// openStore opens the store named by url, or the default bbolt store under
// dataDir; a locked store becomes exit code 3.
func openStore(ctx context.Context, url, dataDir string) (plugin.Storage, error) {
	if url == "" {
		url = "bbolt://"
	}
	st, err := plugin.OpenStorage(ctx, url, plugin.Env{DataDir: dataDir, Log: logger()})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}

func lockedExit(err error) error {
	if errors.Is(err, plugin.ErrLocked) || errors.Is(err, host.ErrAgentRunning) {
		return exitCode(exitLocked, err)
	}
	return err
}

func runAgent(ctx context.Context, f runFlags) error {
	log := logger()
	if f.agent == "" {
		return errors.New("--agent is required")
	}
	if err := agent.ValidateID(f.agent); err != nil {
		return fmt.Errorf("--agent: %w", err)
	}
	if f.listen != "" && f.token == "" && !loopbackAddr(f.listen) {
		return fmt.Errorf("--listen %s is not a loopback address: set --token (or OPENSTARRY_API_TOKEN) so the API is not open to the network", f.listen)
	}
	// One process per agent, whatever the store: taken before anything
	// else starts (the embedded broker, the store, the listener).
	lock, err := host.LockAgent(f.data, f.agent)
	if err != nil {
		return lockedExit(err)
	}
	defer lock.Unlock()
	res, err := f.blueprint(ctx)
	if err != nil {
		return err
	}
	storeURL := f.store
	if storeURL == "" {
		storeURL = res.Template.Storage
	}
	mw, err := newMQTTWiring(f.mqtt, f.agent, f.data, res.Template.Limits.WithDefaults().MaxTaskBytes, log)
	if err != nil {
		return err
	}
	defer mw.Close()
	if err := privfs.MkdirAll(f.data); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	st, err := openStore(ctx, storeURL, f.data)
	if err != nil {
		return err
	}
	defer st.Close()

	log.Info().Str("agent", f.agent).Str("template", res.Template.Name).Str("template_version", res.Template.Version).
		Str("store", orDefault(storeURL, "bbolt://")).Str("data", f.data).Str("version", version).Msg("starting agent")
	rt, err := host.Start(ctx, host.Agent{
		ID: f.agent, Template: res.Template, Vars: res.Vars(), Store: st, DataDir: f.data, Log: log,
		Outbox: mw.Outbox(), OnProgress: mw.Progress,
		BeforeSave: f.hooks.beforeSave, AfterSave: f.hooks.afterSave,
	})
	if err != nil {
		return lockedExit(err)
	}
	if err := mw.Start(ctx, rt); err != nil {
		_ = rt.Stop(context.Background())
		return err
	}

	var srv *http.Server
	httpErr := make(chan error, 1)
	if f.listen != "" {
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			_ = rt.Stop(context.Background())
			return fmt.Errorf("listen %s: %w", f.listen, err)
		}
		api := httpapi.New(httpapi.Options{Agents: httpapi.Single{R: rt}, Token: f.token,
			MaxTaskBytes: res.Template.Limits.WithDefaults().MaxTaskBytes, Log: log})
		for pattern, h := range f.hooks.routes {
			api.Handle(pattern, h)
		}
		srv = httpx.NewServer(api, httpx.Limits{})
		go func() { httpErr <- srv.Serve(httpx.Listen(ln, httpx.Limits{}, false, log)) }()
		log.Info().Str("addr", "http://"+ln.Addr().String()).Msgf("listening on http://%s", ln.Addr())
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	var runErr error
	select {
	case s := <-sig:
		log.Info().Str("signal", s.String()).Msg("stopping: finishing the current tick")
	case <-ctx.Done():
		log.Info().Msg("stopping: finishing the current tick")
	case <-rt.Done():
		runErr = rt.Err()
	case err := <-httpErr:
		runErr = fmt.Errorf("http: %w", err)
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if err := rt.Stop(context.Background()); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
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
