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
	httpc    *http.Client        // to the agents' loopback APIs, with apiToken
	apiToken string              // the agents' ports require it (control.EnvAPIToken)
	retireMu sync.Mutex          // one ephemeral worker retired at a time
	store    *control.StoreState // the state store as phase 1 found it (under mu)

	token    string // the operator's: DATA/run/control.token
	ctrlAddr string
	httpAddr string
	lock     *dirLock
	reg      *registry
	started  time.Time

	sess        sessionManager // session continuity: DATA/sessions.db, opened in phase 1; none without a session store
	previousRun string         // how the previous run ended (boot journal): none, clean, crash, power_loss

	closers []func() // what the boot opened, closed in reverse when run returns

	life       context.Context // ends at shutdown: handoffs stop
	cancelLife context.CancelFunc
	handoffs   sync.WaitGroup
	scrubs     sync.WaitGroup // the scrub of sessions.db, ended by life
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
	d := &Daemon{o: o, cfg: &cfg, log: o.Log, data: data, runDir: filepath.Join(data, "run"),
		now: o.Now, rand: o.Rand, members: map[string]*member{}, recover: map[string]bool{},
		events: make(chan control.AgentInfo, 256)}
	d.apiToken = crand.Text()
	d.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &agentAuth{token: d.apiToken,
		base: &http.Transport{MaxIdleConnsPerHost: proxyIdleConns, IdleConnTimeout: 30 * time.Second}}}
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

func (d *Daemon) phaseDone(n int, name, msg string, start time.Time, ev *zerolog.Event) {
	dur := d.now().Sub(start)
	d.mu.Lock()
	d.phases = append(d.phases, control.Phase{N: n, Name: name, DurationMs: float64(dur.Microseconds()) / 1000, Done: true})
	d.mu.Unlock()
	ev.Int("phase", n).Float64("duration_ms", float64(dur.Microseconds())/1000).Msg(msg)
}

func shutdownServer(s *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}
