package daemon

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/connpass"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

// Resolver is the design layer as the daemon uses it (*design.Resolver).
type Resolver interface {
	Preflight(ctx context.Context) error
	Resolve(ctx context.Context, nameOrFile string) (*design.Resolved, error)
}

// Infrastructure is a plugin the daemon starts in phase 1, before any
// agent, and closes last: the embedded MQTT broker, a hub connection. The
// daemon hard-codes none; the command line hands them in.
type Infrastructure interface {
	Name() string
	Start(ctx context.Context) error
	// AgentArgs returns the flags and environment variables ("K=V") an
	// agent process gets from this plugin (--broker URL, the password).
	AgentArgs(agentID, role string) (args, env []string)
	Close() error
}

// InfraStatus is what an Infrastructure that implements StatusReporter
// says of itself, for /healthz and /metrics.
type InfraStatus struct {
	Up     bool
	Detail string
	// Off is set when the configuration turned the plugin off (mqtt.disabled):
	// /healthz says "off" and /metrics openstarry_infra_enabled 0, neither
	// up nor down.
	Off bool
	// Gauges are exported as openstarry_infra_{name}{infra="Name"}.
	Gauges map[string]float64
}

// StatusReporter is implemented by Infrastructure that can report health.
type StatusReporter interface {
	Status() InfraStatus
}

// Options configure a daemon.
type Options struct {
	// Config is the validated configuration. Config.Data is made absolute.
	Config *config.Config
	// Resolver resolves templates (phase 2 and every spawn).
	Resolver Resolver
	// Infra are started in order in phase 1 and closed in reverse.
	Infra []Infrastructure
	// Sessions is session continuity: a SessionLink, or why there is none
	// (sessions.go).
	Sessions Sessions
	// Executable is the openstarry binary the agents run; default
	// os.Executable().
	Executable string
	// Launcher starts agent processes; default an ExecLauncher of
	// Executable. Tests use fakes.
	Launcher Launcher
	// ChildLog receives the agents' log lines; default os.Stderr.
	ChildLog io.Writer
	// Version is reported by status and /metrics.
	Version string
	// Revision is the source revision of the build, for
	// openstarry_build_info; empty means the build's VCS stamp.
	Revision string
	Log      zerolog.Logger
	// OnAgentState, when set, is told of every agent state change
	// (crashloop included), from one goroutine, in order. It must not
	// block for long: changes beyond a backlog of 256 are dropped.
	OnAgentState func(control.AgentInfo)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand returns a float in [0, 1) for backoff jitter; default
	// math/rand/v2.
	Rand func() float64
	// Booted, when set, is called once boot phase 4 is done.
	Booted func()
	// HTTPLimits bound the HTTP listener and the control API (timeouts,
	// connections); the zero value is httpx's defaults.
	HTTPLimits httpx.Limits
	// Web, when set, wraps the HTTP listener's handler: it serves the web
	// UI and may let a browser session stand for http.token
	// (transport/webui). The daemon's own routes are the handler it gets.
	Web func(api http.Handler) http.Handler
}

// Daemon is the Orchestrator: a composition of parts, each of which owns
// its state and the lock that guards it, and the boot sequence that starts
// them in order (boot.go). Its own fields are the environment its parts
// share (read-only once built), the resources the boot opened, and the link
// to session continuity (sessions.go, which reaches the parts through the
// few methods at the end of this file). Its methods are the boot, the
// shutdown, the session link and proxyAgent (proxy.go), the pass-through
// to the agents' own APIs that the HTTP listener serves.
//
//   - boot (bootState, boot.go, journal.go): when this boot started, the
//     phases done, whether phase 4 is, what phase 1 found (interrupted
//     agents, the state store) and how the previous run ended.
//   - infra (infraSet, infra.go): the infrastructure plugins and which are up.
//   - super (supervisor, members.go, supervise.go): the process table, one
//     member per agent id, each with the goroutine that owns its process.
//   - specs (specs, spec.go): templates resolved and frozen into
//     blueprints, and the command line of an agent process.
//   - workers (workers, workers.go, retire.go, registry.go): workers on
//     demand, their registry DATA/run/workers.json, ephemeral retirement.
//   - handoffs (handoffs, handoff.go): tasks carried from a requester to a
//     worker and results back.
//   - ctl (controlAPI, api.go): the control API and its tokens.
//   - httpd (httpAPI, httpd.go): the HTTP listener.
//   - a reporter (status.go, metrics.go): status, /healthz and /metrics,
//     read from the parts; it owns nothing.
type Daemon struct {
	o      Options        // as handed in; each part got what it uses from it in newDaemon
	cfg    *config.Config // Options.Config, Data made absolute
	log    zerolog.Logger
	data   string // absolute
	runDir string
	now    func() time.Time
	httpc  *http.Client // to the agents' loopback APIs, with their per-boot token (agentAuth)

	life       context.Context // ends at shutdown: handoffs, scrubs and the state notifications stop
	cancelLife context.CancelFunc
	closers    []func() // what the boot opened, closed in reverse when run returns (the boot's goroutine only)

	boot     *bootState
	infra    *infraSet
	super    *supervisor
	specs    *specs
	workers  *workers
	handoffs *handoffs
	ctl      *controlAPI
	httpd    *httpAPI

	// The link to session continuity (sessions.go).
	sess   sessionManager // DATA/sessions.db, opened in phase 1; none without a session store
	scrubs sync.WaitGroup // the scrub of sessions.db, ended by life
	mu     sync.Mutex     // guards sessScrubs and sessDamage
	// sessScrubs and sessDamage count the scrubs of sessions.db and the
	// damaged parts they found.
	sessScrubs, sessDamage uint64
}

// Run boots the daemon and runs it until ctx ends, then stops every agent
// in the reverse order of their start and returns. An error before the
// master is spawned (the lock, the control API, infrastructure, the state
// store, the design layer) ends Run with that error; ErrRunning when
// another daemon holds the data directory.
func Run(ctx context.Context, o Options) error {
	d, err := newDaemon(o)
	if err != nil {
		return err
	}
	err = d.run(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // stopped during the boot
	}
	return err
}

func newDaemon(o Options) (*Daemon, error) {
	if o.Config == nil || o.Resolver == nil {
		return nil, errors.New("daemon: Config and Resolver are required")
	}
	cfg := *o.Config
	data, err := filepath.Abs(cfg.Data)
	if err != nil {
		return nil, err
	}
	cfg.Data = data
	now, rnd := o.Now, o.Rand
	if now == nil {
		now = time.Now
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	launcher := o.Launcher
	if launcher == nil {
		exe := o.Executable
		if exe == "" {
			if exe, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("daemon: the agents' executable: %w", err)
			}
		}
		sink := o.ChildLog
		if sink == nil {
			sink = os.Stderr
		}
		lvl, err := zerolog.ParseLevel(strings.ToLower(cfg.Log.Level))
		if err != nil {
			lvl = zerolog.InfoLevel
		}
		launcher = &ExecLauncher{Path: exe, Sink: sink, MinLevel: lvl}
	}
	apiToken := crand.Text() // the agents' ports require it (control.EnvAPIToken)
	var pass *connPass
	if connpass.Supported && cfg.HTTP.Handoff && cfg.HTTP.Listen != "" && o.Launcher == nil {
		// The agents apply the listener's rules to the connections
		// handed to them (pass.go).
		pass = newConnPass(connpass.Settings{Hosts: cfg.HTTP.Hosts, TokenSHA256: connpass.HashToken(cfg.HTTP.Token),
			Limits: o.HTTPLimits.WithDefaults()}, o.Log)
	}
	d := &Daemon{o: o, cfg: &cfg, log: o.Log, data: data, runDir: filepath.Join(data, "run"), now: now,
		httpc: &http.Client{Timeout: 10 * time.Second, Transport: &agentAuth{token: apiToken,
			base: &http.Transport{MaxIdleConnsPerHost: proxyIdleConns, IdleConnTimeout: 30 * time.Second}}}}
	d.life, d.cancelLife = context.WithCancel(context.Background())

	// The parts, allocated first so that each can be handed the others it
	// uses, then built.
	d.boot, d.infra, d.super, d.specs = new(bootState), new(infraSet), new(supervisor), new(specs)
	d.workers, d.handoffs, d.ctl, d.httpd = new(workers), new(handoffs), new(controlAPI), new(httpAPI)
	rep := &reporter{version: o.Version, revision: o.Revision, data: data, boot: d.boot, super: d.super,
		infra: d.infra, workers: d.workers, httpd: d.httpd, httpc: d.httpc, sessions: d.sessionScrubs}
	*d.boot = bootState{runDir: d.runDir, log: d.log, now: now}
	*d.infra = infraSet{list: o.Infra, log: d.log, now: now}
	*d.super = supervisor{cfg: &cfg, log: d.log, now: now, rand: rnd, launcher: launcher, launchSpec: d.specs.launchSpec,
		onState: o.OnAgentState, events: make(chan control.AgentInfo, 256), members: map[string]*member{}, recover: map[string]bool{}, pass: pass}
	*d.specs = specs{cfg: &cfg, data: data, runDir: d.runDir, res: o.Resolver, infra: d.infra, ctl: d.ctl, apiToken: apiToken}
	*d.workers = workers{cfg: &cfg, log: d.log, now: now, data: data, boot: d.boot, super: d.super, specs: d.specs, handoffs: d.handoffs}
	*d.handoffs = handoffs{log: d.log, life: d.life, httpc: d.httpc, super: d.super, workers: d.workers}
	*d.ctl = controlAPI{cfg: &cfg, log: d.log, runDir: d.runDir, limits: o.HTTPLimits, super: d.super, specs: d.specs,
		workers: d.workers, report: rep, sessionTool: d.handleSessionTool}
	*d.httpd = httpAPI{cfg: &cfg, log: d.log, limits: o.HTTPLimits, web: o.Web, report: rep,
		proxy: d.proxyAgent, sessionRoutes: d.sessionRoutes, pass: pass}
	return d, nil
}

// sessionScrubs returns the scrubs of sessions.db and the damage they found.
func (d *Daemon) sessionScrubs() (scrubs, damage uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sessScrubs, d.sessDamage
}

// What the session link (sessions.go) and proxyAgent (proxy.go) ask of the
// parts.

func (d *Daemon) member(id string) *member { return d.super.member(id) }

func (d *Daemon) spawnWorker(ctx context.Context, requester string, req control.AgentRequest) (*control.SpawnResult, error) {
	return d.workers.spawn(ctx, requester, req)
}

func (d *Daemon) agentToken(id string) string { return d.ctl.agentToken(id) }

func (d *Daemon) openJournal() (string, error) { return d.boot.openJournal() }

func (d *Daemon) journalCleanStop() { d.boot.journalCleanStop() }

func shutdownServer(s *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}
