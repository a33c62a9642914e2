package daemon

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"

	"github.com/openstarry/openstarry-edge/core/privfs"
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
	Log     zerolog.Logger
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

// Daemon is the Orchestrator: the boot sequence, the supervisors of the
// agent processes, the control API and the HTTP listener.
type Daemon struct {
	o        Options
	cfg      *config.Config
	log      zerolog.Logger
	data     string // absolute
	runDir   string
	launcher Launcher
	now      func() time.Time
	rand     func() float64
	httpc    *http.Client        // to the agents' loopback APIs
	retireMu sync.Mutex          // one ephemeral worker retired at a time
	store    *control.StoreState // the state store as phase 1 found it (under mu)

	token    string // the operator's: DATA/run/control.token
	ctrlAddr string
	httpAddr string
	lock     *dirLock
	reg      *registry
	started  time.Time

	sess        sessionManager // session continuity: DATA/sessions.db, opened in phase 1; none in a nosqlite build
	previousRun string         // how the previous run ended (boot journal): none, clean, crash, power_loss

	life       context.Context // ends at shutdown: handoffs stop
	cancelLife context.CancelFunc
	handoffs   sync.WaitGroup
	events     chan control.AgentInfo

	mu          sync.Mutex // guards the fields below
	members     map[string]*member
	seq         uint64
	stopping    bool
	booted      bool
	phases      []control.Phase
	interrupted []control.Interruption
	recover     map[string]bool
	infraUp     []bool
	agentTokens map[string]string // control token → the agent it was handed to
	tokenOf     map[string]string // agent id → its control token
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
	d := &Daemon{o: o, cfg: &cfg, log: o.Log, data: data, runDir: filepath.Join(data, "run"),
		now: o.Now, rand: o.Rand, members: map[string]*member{}, recover: map[string]bool{},
		httpc:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}},
		events: make(chan control.AgentInfo, 256)}
	if d.now == nil {
		d.now = time.Now
	}
	if d.rand == nil {
		d.rand = rand.Float64
	}
	d.launcher = o.Launcher
	if d.launcher == nil {
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
		d.launcher = &ExecLauncher{Path: exe, Sink: sink, MinLevel: lvl}
	}
	return d, nil
}

func (d *Daemon) run(ctx context.Context) (err error) {
	d.started = d.now()
	d.life, d.cancelLife = context.WithCancel(context.Background())
	defer d.cancelLife()
	go d.deliverEvents()

	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	// Phase 1: infrastructure.
	t1 := d.now()
	if err := privfs.MkdirAll(d.runDir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	lock, err := lockDir(d.runDir)
	if err != nil {
		return err
	}
	d.lock = lock
	closers = append(closers, lock.release)
	if d.reg, err = openRegistry(d.runDir); err != nil {
		return err
	}
	// The state database before anything can use it: sessions.db opened
	// and migrated, sessions the previous run left open marked interrupted.
	if err := d.openSessions(ctx); err != nil {
		return err
	}
	// Every return from here is an orderly stop (a kill -9 runs nothing):
	// open sessions end as shutdown, and the journal records the clean stop.
	closers = append(closers, func() { d.closeSessions(true) })
	if d.token, err = control.NewToken(); err != nil {
		return err
	}
	ctrlLn, addr, err := control.Listen(d.runDir)
	if err != nil {
		return err
	}
	d.ctrlAddr = addr
	if err := control.WriteToken(d.runDir, d.token); err != nil {
		ctrlLn.Close()
		return fmt.Errorf("control token: %w", err)
	}
	closers = append(closers, func() { control.RemoveFiles(d.runDir) })
	ctrlSrv := httpx.NewServer(d.controlHandler(), d.o.HTTPLimits)
	go func() { _ = ctrlSrv.Serve(httpx.Listen(ctrlLn, d.o.HTTPLimits, false, d.log)) }()
	closers = append(closers, func() { shutdownServer(ctrlSrv) })

	if d.cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", d.cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w", d.cfg.HTTP.Listen, err)
		}
		d.httpAddr = "http://" + ln.Addr().String()
		h := d.httpHandler()
		if d.o.Web != nil {
			h = d.o.Web(h)
		}
		srv := httpx.NewServer(h, d.o.HTTPLimits)
		go func() { _ = srv.Serve(httpx.Listen(ln, d.o.HTTPLimits, false, d.log)) }()
		closers = append(closers, func() { shutdownServer(srv) })
		d.log.Info().Str("addr", d.httpAddr).Msgf("daemon listening on %s", d.httpAddr)
	}
	d.infraUp = make([]bool, len(d.o.Infra))
	for i, inf := range d.o.Infra {
		ts := d.now()
		if err := inf.Start(ctx); err != nil {
			_ = inf.Close() // whatever it started before failing
			return fmt.Errorf("infrastructure %s: %w", inf.Name(), err)
		}
		d.mu.Lock()
		d.infraUp[i] = true
		d.mu.Unlock()
		closers = append(closers, func() {
			if err := inf.Close(); err != nil {
				d.log.Warn().Err(err).Str("infra", inf.Name()).Msg("closing infrastructure")
			}
		})
		d.log.Info().Str("infra", inf.Name()).Int64("duration_ms", d.now().Sub(ts).Milliseconds()).Msgf("infrastructure %s ready", inf.Name())
	}
	interrupted, err := d.scanInterruptions(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.interrupted = interrupted
	for _, in := range interrupted {
		if in.Error == "" {
			d.recover[in.AgentID] = true
		}
	}
	d.mu.Unlock()
	d.phaseDone(1, "infrastructure", "phase 1/4 infrastructure ready", t1,
		d.log.Info().Str("control", d.ctrlAddr).Int("interrupted", len(interrupted)))

	// Phase 2: the design layer.
	t2 := d.now()
	if err := d.o.Resolver.Preflight(ctx); err != nil {
		return fmt.Errorf("design layer: %w", err)
	}
	masterID := d.cfg.Master.Agent
	mspec, err := d.resolveSpec(ctx, masterID, d.cfg.Master.Template, "", "")
	if err != nil {
		return fmt.Errorf("design layer: master template: %w", err)
	}
	d.phaseDone(2, "design layer", "phase 2/4 design layer ready", t2,
		d.log.Info().Str("template", mspec.Template).Str("source", mspec.Source).Str("digest", mspec.Digest))

	// Phase 3: the master.
	t3 := d.now()
	d.log.Info().Str("agent", masterID).Str("blueprint", mspec.Blueprint).Msg("spawning the master")
	m, err := d.addMember(masterID, control.RoleMaster, mspec)
	if err != nil {
		return err
	}
	online := d.waitSettled(ctx, m)
	if ctx.Err() != nil {
		d.shutdown()
		return nil
	}
	if online {
		d.phaseDone(3, "master", "phase 3/4 master online", t3,
			d.log.Info().Str("agent", masterID).Int("pid", m.info().PID).Str("addr", m.info().Addr))
	} else {
		info := m.info()
		d.phaseDone(3, "master", "phase 3/4 master NOT online", t3,
			d.log.Error().Str("agent", masterID).Str("state", info.State).Str("last_error", info.LastError))
	}

	// Phase 4: workers on demand.
	t4 := d.now()
	restored := d.restoreWorkers(ctx)
	d.mu.Lock()
	d.booted = true
	d.mu.Unlock()
	d.startSessions(ctx)
	d.phaseDone(4, "workers", "phase 4/4 workers on demand ready", t4, d.log.Info().Int("restored_workers", restored))
	d.log.Info().Int64("duration_ms", d.now().Sub(d.started).Milliseconds()).Msg("boot complete")
	if d.o.Booted != nil {
		d.o.Booted()
	}

	<-ctx.Done()
	d.log.Info().Msg("stopping: agents in reverse order of their start")
	d.shutdown()
	return nil
}

// waitSettled waits until m is running (true), or in crashloop or stopped,
// or ctx ends (false).
func (d *Daemon) waitSettled(ctx context.Context, m *member) bool {
	for {
		st, _, ch := m.watch()
		switch st {
		case control.StateRunning:
			return true
		case control.StateCrashloop, control.StateStopped:
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (d *Daemon) phaseDone(n int, name, msg string, start time.Time, ev *zerolog.Event) {
	dur := d.now().Sub(start)
	d.mu.Lock()
	d.phases = append(d.phases, control.Phase{N: n, Name: name, DurationMs: float64(dur.Microseconds()) / 1000, Done: true})
	d.mu.Unlock()
	ev.Int("phase", n).Float64("duration_ms", float64(dur.Microseconds())/1000).Msg(msg)
}

// shutdown stops every agent, the last started first, then ends the
// handoffs (they resume at the next boot).
func (d *Daemon) shutdown() {
	d.mu.Lock()
	d.stopping = true
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(b.seq) - int(a.seq) })
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Supervise.StopTimeout+5*time.Second)
		if err := m.send(ctx, cmdShutdown); err != nil {
			d.log.Warn().Str("agent", m.id).Err(err).Msg("stopping agent")
		}
		cancel()
	}
	d.cancelLife()
	d.handoffs.Wait()
	d.log.Info().Int("agents", len(ms)).Msg("all agents stopped")
}

func shutdownServer(s *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}

// errStopping is returned for requests during shutdown.
var errStopping = errors.New("the daemon is stopping")

// addMember registers a supervised agent and starts its supervisor. The
// same id is never supervised twice.
func (d *Daemon) addMember(id, role string, spec agentSpec) (*member, error) {
	m, err := d.reserve(id, role, spec)
	if err != nil {
		return nil, err
	}
	go m.run()
	return m, nil
}

// reserve registers a supervised agent without starting it: the id is
// taken, atomically with the check that it is free. The caller starts it
// (go m.run()) or gives it back (release).
func (d *Daemon) reserve(id, role string, spec agentSpec) (*member, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return nil, errStopping
	}
	if old, ok := d.members[id]; ok {
		info := old.info()
		return nil, &control.Error{Status: http.StatusConflict, Code: control.CodeConflict,
			Msg: fmt.Sprintf("agent %s is already supervised by this daemon (state %s, pid %d)", id, info.State, info.PID)}
	}
	d.seq++
	m := newMember(d, id, role, d.seq, spec)
	m.recovered = d.recover[id]
	d.members[id] = m
	return m, nil
}

// release gives back a reserved, never started member.
func (d *Daemon) release(m *member) {
	d.mu.Lock()
	if d.members[m.id] == m {
		delete(d.members, m.id)
	}
	d.mu.Unlock()
	close(m.done)
}

// removeMember ends an agent's supervision (its process stopped first).
func (d *Daemon) removeMember(ctx context.Context, m *member) error {
	if err := m.send(ctx, cmdShutdown); err != nil {
		return err
	}
	d.mu.Lock()
	if d.members[m.id] == m {
		delete(d.members, m.id)
	}
	d.mu.Unlock()
	return nil
}

func (d *Daemon) member(id string) *member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.members[id]
}

// sortedMembers returns the members in their order of creation.
func (d *Daemon) sortedMembers() []*member {
	d.mu.Lock()
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(a.seq) - int(b.seq) })
	return ms
}

// resolveSpec resolves a template and freezes it for agent id (see
// freeze). With wantRole, a template of another role is refused before
// anything is written.
func (d *Daemon) resolveSpec(ctx context.Context, id, name, requester, wantRole string) (agentSpec, error) {
	if err := agent.ValidateID(id); err != nil {
		return agentSpec{}, err
	}
	res, err := d.o.Resolver.Resolve(ctx, name)
	if err != nil {
		return agentSpec{}, err
	}
	if wantRole != "" && res.Template.Role != wantRole {
		return agentSpec{}, fmt.Errorf("%w: template %s has role %s, not %s", errRole, name, res.Template.Role, wantRole)
	}
	return d.freeze(id, res, requester)
}

// errRole is wrapped when a template of the wrong role is asked for.
var errRole = errors.New("wrong template role")

// freeze writes the resolved bytes to DATA/run/blueprints/{id}/{name}.json,
// atomically and read-only: the blueprint the agent process reads, which
// never changes under it. The file is named after the template because a
// template file must be.
func (d *Daemon) freeze(id string, res *design.Resolved, requester string) (agentSpec, error) {
	dir := filepath.Join(d.runDir, "blueprints", id)
	if err := privfs.MkdirAll(dir); err != nil {
		return agentSpec{}, fmt.Errorf("freeze blueprint: %w", err)
	}
	path := filepath.Join(dir, res.Template.Name+".json")
	if err := atomicfile.WriteFile(path, res.Raw, privfs.ReadOnlyMode); err != nil {
		return agentSpec{}, fmt.Errorf("freeze blueprint: %w", err)
	}
	t := res.Template
	spec := agentSpec{Template: t.Name, Source: res.Source, Digest: res.Digest, Blueprint: path, Requester: requester,
		Workers: t.Workers, Tools: t.Tools, Storage: t.Storage, MaxTaskBytes: t.Limits.WithDefaults().MaxTaskBytes,
		Ephemeral: t.Ephemeral && t.Role == design.RoleWorker}
	spec.KeepEnv = secretEnvs(t)
	return spec, nil
}

// secretEnvs names the environment variables a template reads its secrets
// from (the model's API key, webhook secrets, the memory engine's key): the
// agent keeps them even when they are OPENSTARRY_* variables.
func secretEnvs(t *design.Template) []string {
	var keep []string
	if t.Brain.APIKeyEnv != "" {
		keep = append(keep, t.Brain.APIKeyEnv)
	}
	for _, l := range t.Listeners {
		if l.SecretEnv != "" {
			keep = append(keep, l.SecretEnv)
		}
	}
	if u, err := url.Parse(t.Memory); err == nil {
		if k := u.Query().Get("api_key_env"); k != "" {
			keep = append(keep, k)
		}
	}
	return keep
}

// launchSpec builds the command line and environment of an agent process:
// `openstarry core` with the frozen blueprint, HTTP on a loopback port the
// kernel picks, JSON logs. The environment is the daemon's without any
// OPENSTARRY_* variable, so that every setting an agent runs with is one the
// daemon decided (flag > env > file > default was resolved here), plus the
// control API's address and the agent's own token.
func (d *Daemon) launchSpec(id, role string, spec agentSpec) LaunchSpec {
	lvl := strings.ToLower(d.cfg.Log.Level)
	if l, err := zerolog.ParseLevel(lvl); err != nil || l > zerolog.InfoLevel {
		lvl = "info" // readiness is an info line; the daemon filters what it forwards
	}
	args := []string{"core", "--agent", id, "--data", d.data, "--template", spec.Blueprint,
		"--listen", "127.0.0.1:0", "--log-level", lvl, "--log-format", "json"}
	if spec.Storage == "" && d.cfg.Store != "" {
		args = append(args, "--store", d.cfg.Store)
	}
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.ToUpper(k), "OPENSTARRY_") && !slices.Contains(spec.KeepEnv, k) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, control.EnvAddr+"="+d.ctrlAddr, control.EnvToken+"="+d.agentToken(id),
		"OPENSTARRY_PARENT_PIPE=1", "OPENSTARRY_LOG_FORMAT=json")
	for _, inf := range d.o.Infra {
		a, e := inf.AgentArgs(id, role)
		args = append(args, a...)
		env = append(env, e...)
	}
	return LaunchSpec{AgentID: id, Args: args, Env: env}
}

// notify queues a state change for OnAgentState.
func (d *Daemon) notify(info control.AgentInfo) {
	if d.o.OnAgentState == nil {
		return
	}
	select {
	case d.events <- info:
	default:
		d.log.Warn().Str("agent", info.ID).Str("state", info.State).Msg("agent state notification dropped (backlog full)")
	}
}

// deliverEvents calls OnAgentState in order until the daemon stops.
func (d *Daemon) deliverEvents() {
	for {
		select {
		case info := <-d.events:
			if d.o.OnAgentState != nil {
				d.o.OnAgentState(info)
			}
		case <-d.life.Done():
			return
		}
	}
}

// agentToken returns the control token of agent id, made at its first
// spawn and kept for the daemon's life. A request with it acts as that
// agent and nothing else (see controlHandler).
func (d *Daemon) agentToken(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if tok, ok := d.tokenOf[id]; ok {
		return tok
	}
	if d.tokenOf == nil {
		d.tokenOf, d.agentTokens = map[string]string{}, map[string]string{}
	}
	tok := crand.Text()
	d.tokenOf[id], d.agentTokens[tok] = tok, id
	return tok
}

// tokenAgent returns the agent a control token was handed to.
func (d *Daemon) tokenAgent(tok string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.agentTokens[tok]
	return id, ok
}
