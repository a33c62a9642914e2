package host

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

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// Options describe one agent process: `openstarry run`, and `openstarry
// core` under the daemon.
type Options struct {
	AgentID string
	// Template is a template name or the path of a blueprint file, for
	// Resolve.
	Template string
	// Resolve finds and validates the blueprint (the design layer).
	Resolve func(ctx context.Context, nameOrFile string) (*design.Resolved, error)
	// Config holds the data directory, the store URL ("" = the
	// template's, else bbolt:// under the data directory) and mqtt.*,
	// handed to the transport.mqtt plugin.
	Config *config.Config
	// Listen is the HTTP address of the agent's API; "" disables it.
	Listen string
	// API builds the HTTP handler of the agent's API (transport/httpapi).
	API func(rt *agent.Runtime, maxTaskBytes int) http.Handler
	// AlsoServe, when set, is called once the API listens, with the
	// handler its listener serves and the listener's host:port, to serve
	// the API elsewhere too (the connections the daemon hands over:
	// core/connpass); the function it returns (nil: none) is called as the
	// listener shuts down, before the runtime stops.
	AlsoServe func(api http.Handler, addr string) (stop func(context.Context))
	// DaemonChild says the daemon runs this agent: it owns the device's
	// status topic.
	DaemonChild bool
	// BeforeSave and AfterSave are called around every Save (the
	// daemon's agents measure the save latency with them).
	BeforeSave, AfterSave func(*agent.Snapshot)
	// Decider reaches session continuity's approvals (the daemon's
	// agents); nil without a daemon.
	Decider agent.Decider
	// OnScrub is told the outcome of every scrub of the agent's store
	// (scrub.go); the daemon's agents count them in their metrics.
	OnScrub func(plugin.ScrubReport, error)
	Version string
	Log     zerolog.Logger
}

// OpenStore opens the store named by url, or the default bbolt store under
// dataDir.
func OpenStore(ctx context.Context, url, dataDir string, log zerolog.Logger) (plugin.Storage, error) {
	if url == "" {
		url = "bbolt://"
	}
	st, err := plugin.OpenStorage(ctx, url, plugin.Env{DataDir: dataDir, Log: log})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}

// Run is the life of one agent process: it takes the agent's lock (before
// anything else starts), resolves the blueprint, opens the store, boots the
// runtime (Start), connects MQTT, serves the HTTP API, and on SIGTERM,
// SIGINT or the end of ctx finishes the current tick and stops. It returns
// the runtime's error, if it failed on its own. An error wrapping
// ErrAgentRunning or plugin.ErrLocked means another process runs the agent.
func Run(ctx context.Context, o Options) error {
	log, cfg := o.Log, o.Config
	// Caught from the start and until the store is closed (deferred
	// first, this runs last): a signal during the start stops the agent
	// once it runs, and a second one while it stops (a daemon that died
	// sends SIGTERM twice: its death signal, then the end of the agent's
	// stdin) does not kill it in the middle of the store's last commit.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	lock, err := LockAgent(cfg.Data, o.AgentID)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	res, err := o.Resolve(ctx, o.Template)
	if err != nil {
		return err
	}
	storeURL := cfg.Store
	if storeURL == "" {
		storeURL = res.Template.Storage
	}
	maxTaskBytes := res.Template.Limits.WithDefaults().MaxTaskBytes
	var tr plugin.Transport
	if !cfg.MQTT.Disabled {
		if tr, err = plugin.OpenTransport("mqtt", cfg, plugin.TransportEnv{AgentID: o.AgentID, DataDir: cfg.Data,
			MaxTaskBytes: maxTaskBytes, DaemonChild: o.DaemonChild, Role: res.Template.Role, Version: o.Version, Log: log}); err != nil {
			return err
		}
		defer tr.Close()
	}
	if err := privfs.MkdirAll(cfg.Data); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	st, err := OpenStore(ctx, storeURL, cfg.Data, log)
	if err != nil {
		return err
	}
	defer st.Close()

	if storeURL == "" {
		storeURL = "bbolt://"
	}
	log.Info().Str("agent", o.AgentID).Str("template", res.Template.Name).Str("template_version", res.Template.Version).
		Str("store", storeURL).Str("data", cfg.Data).Str("version", o.Version).Msg("starting agent")
	// Stopped before the store is closed (defers run last first).
	sc, stopScrub := startScrub(st, o.AgentID, cfg.ScrubInterval, o.OnScrub, log)
	defer stopScrub()
	afterSave := o.AfterSave
	if sc != nil {
		afterSave = sc.wrap(o.AfterSave)
	}
	a := Agent{ID: o.AgentID, Template: res.Template, Vars: res.Vars(), Store: st, DataDir: cfg.Data, Log: log,
		BeforeSave: o.BeforeSave, AfterSave: afterSave, Decider: o.Decider}
	if tr != nil {
		a.Outbox, a.OnProgress = tr, tr.Progress
	}
	rt, err := Start(ctx, a)
	if err != nil {
		return err
	}
	if tr != nil {
		err = tr.Start(ctx, rt)
	} else {
		log.Info().Msg("MQTT disabled (--no-mqtt): tasks only over HTTP")
	}
	if err != nil {
		_ = rt.Stop(context.Background())
		return err
	}

	var srv *http.Server
	var stopAlso func(context.Context)
	httpErr := make(chan error, 1)
	if o.Listen != "" {
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			_ = rt.Stop(context.Background())
			return fmt.Errorf("listen %s: %w", o.Listen, err)
		}
		api := httpx.AllowHosts(nil, o.API(rt, maxTaskBytes))
		srv = httpx.NewServer(api, httpx.Limits{})
		go func() { httpErr <- srv.Serve(httpx.Listen(ln, httpx.Limits{}, false, log)) }()
		if o.AlsoServe != nil {
			stopAlso = o.AlsoServe(api, ln.Addr().String())
		}
		log.Info().Str("addr", "http://"+ln.Addr().String()).Msgf("listening on http://%s", ln.Addr())
	}

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
		also := make(chan struct{})
		go func() {
			defer close(also)
			if stopAlso != nil {
				stopAlso(sctx)
			}
		}()
		_ = srv.Shutdown(sctx)
		<-also
		cancel()
	}
	if err := rt.Stop(context.Background()); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// Locked reports whether err says another process runs the agent.
func Locked(err error) bool {
	return errors.Is(err, ErrAgentRunning) || errors.Is(err, plugin.ErrLocked)
}
