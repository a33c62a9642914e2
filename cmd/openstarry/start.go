package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/logx"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/webui"
)

// configFlags locate the configuration: every daemon-side command has them.
type configFlags struct {
	config string
	data   string
}

func (f *configFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", envOr("OPENSTARRY_CONFIG", ""), "configuration file (YAML; every key in configs/openstarry.yaml) (env OPENSTARRY_CONFIG)")
	fl.StringVar(&f.data, "data", "", "data directory; wins over the file's data and OPENSTARRY_DATA (default ./data)")
}

// load reads the configuration with the precedence flag > env > file >
// default, and validates it.
func (f *configFlags) load(cmd *cobra.Command) (*config.Config, error) {
	cfg, err := config.Load(f.config, nil)
	if err != nil {
		return nil, err
	}
	if cmd.Flags().Changed("data") {
		if err := cfg.Set("data", f.data); err != nil {
			return nil, err
		}
	}
	if cmd.Flags().Changed("log-level") {
		_ = cfg.Set("log.level", global.logLevel)
	}
	if cmd.Flags().Changed("log-format") {
		_ = cfg.Set("log.format", global.logFormat)
	}
	if err := cfg.Validate(); err != nil {
		where := "configuration"
		if f.config != "" {
			where = "configuration " + f.config
		}
		return nil, fmt.Errorf("%s:\n%w", where, err)
	}
	abs, err := filepath.Abs(cfg.Data)
	if err != nil {
		return nil, err
	}
	cfg.Data = abs
	global.logLevel, global.logFormat = cfg.Log.Level, cfg.Log.Format
	return cfg, nil
}

func init() {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "start [--config FILE] [--data DIR]",
		Short: "Run the daemon in the foreground (what the service runs)",
		Long: `Run the Orchestrator daemon: boot in four phases (infrastructure, design layer,
master agent, workers on demand), run one process per agent, restart crashed
ones with backoff, and serve the control API (openstarry status, openstarry
agent) and the HTTP listener (the web UI at /, /healthz, /metrics,
/agents/{id}/...).

Exit status: 0 after SIGTERM or SIGINT, 3 when another daemon runs on the data
directory, 1 on any other error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			if handled, err := updateBoot(cfg); handled {
				return err
			}
			if bootFault != nil {
				bootFault()
			}
			if !interactive() {
				return runService(cfg)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runDaemon(ctx, cfg, logger())
		},
	}
	f.bind(cmd)
	rootCmd.AddCommand(cmd)
}

// runDaemon runs the daemon with its log, and its agents', on stderr in the
// format of --log-format.
func runDaemon(ctx context.Context, cfg *config.Config, log zerolog.Logger) error {
	return runDaemonTo(ctx, cfg, log, logx.Writer(os.Stderr, global.logFormat))
}

// runDaemonTo wires the concrete pieces into daemon.Run: the design layer
// resolver, the MQTT infrastructure, the MQTT status publisher, and the web
// UI on the HTTP listener. The
// agents' log lines go to childLog.
func runDaemonTo(ctx context.Context, cfg *config.Config, log zerolog.Logger, childLog io.Writer) error {
	df := designFlags{url: cfg.Design.URL, timeout: cfg.Design.Timeout, retries: cfg.Design.Retries,
		trustedKeys: cfg.Design.TrustedKeys, templates: cfg.Design.Templates}
	res, err := df.resolver(cfg.Data)
	if err != nil {
		return err
	}
	// The last log lines, the daemon's and its agents', for the hub's
	// logs.tail command.
	ring := logx.NewRing(fleet.MaxTailLines)
	childLog = io.MultiWriter(childLog, ring)
	log = log.Output(childLog)
	if err := applyEnrollment(cfg); err != nil {
		return err
	}
	upd, ctx, err := newDaemonUpdater(ctx, cfg, log)
	if err != nil {
		return err
	}
	upd.watchStaged(ctx)
	mi, err := newMQTTInfra(cfg, log)
	if err != nil {
		return err
	}
	if err := mi.enableFleet(cfg, fleetOps{cfg: cfg, ring: ring, upd: upd}); err != nil {
		return err
	}
	ui, err := webui.New(webui.Options{Token: cfg.HTTP.Token, Log: log})
	if err != nil {
		return err
	}
	log.Info().Str("data", cfg.Data).Str("version", version).Msg("openstarry daemon starting")
	err = daemon.Run(ctx, daemon.Options{
		Config:       cfg,
		Resolver:     res,
		Infra:        []daemon.Infrastructure{mi},
		Version:      version,
		Log:          log,
		ChildLog:     childLog,
		OnAgentState: mi.publishState,
		Web:          ui.Wrap,
	})
	if errors.Is(err, daemon.ErrRunning) {
		return exitCode(exitLocked, err)
	}
	if err == nil && upd.restartPending() {
		return upd.restart()
	}
	return err
}

// mqttInfra is the daemon's MQTT infrastructure plugin: in phase 1 it
// starts the embedded broker (no hub configured) and connects the daemon's
// own client, which owns the device's status topic ({prefix}/{device}/status:
// online with the running agents, offline when the daemon stops, and
// offline as its last will) and publishes agent state changes (crashloop)
// retained on {prefix}/{device}/agents/{agent}/state. The agents get the
// broker's URL and the rest of mqtt.* as their flags, and leave the status
// topic alone.
type mqttInfra struct {
	cfg    config.MQTT
	data   string
	log    zerolog.Logger
	device string
	users  []broker.User

	b      *broker.Broker
	url    string
	client paho.Client
	up     atomic.Bool
	everUp atomic.Bool

	mu      sync.Mutex      // guards running and orders the status publications
	running map[string]bool // agents in state running, for the status topic

	fleetDev  *fleet.Device   // the hub's signed commands
	reporter  *fleet.Reporter // the retained telemetry
	updates   *daemonUpdater  // reports the last update's outcome
	reconnect atomic.Int64    // connections after the first
	stopFleet context.CancelFunc
}

// enableFleet makes the daemon's client answer the hub's signed commands and
// publish the device's telemetry.
func (m *mqttInfra) enableFleet(cfg *config.Config, ops fleetOps) error {
	if m.cfg.Disabled {
		return nil
	}
	keys, err := trustedFleetKeys(cfg)
	if err != nil {
		return err
	}
	nonces, err := fleet.OpenNonces(fleetNoncesPath(cfg))
	if err != nil {
		return err
	}
	m.updates = ops.upd
	m.fleetDev = fleet.NewDevice(fleet.DeviceConfig{Prefix: m.cfg.TopicPrefix, Device: m.device, Trusted: keys,
		Nonces: nonces, Ops: ops, Log: m.log.With().Str("component", "fleet").Logger()})
	m.reporter = fleet.NewReporter(m.cfg.TopicPrefix, m.device, m.cfg.TelemetryInterval,
		ops.telemetry(m.device, time.Now(), func() map[string]int64 {
			return map[string]int64{"mqtt_reconnects": m.reconnect.Load()}
		}))
	return nil
}

func newMQTTInfra(cfg *config.Config, log zerolog.Logger) (*mqttInfra, error) {
	m := &mqttInfra{cfg: cfg.MQTT, data: cfg.Data, log: log, running: map[string]bool{}}
	if m.cfg.Disabled {
		return m, nil
	}
	dev, err := (&mqttFlags{device: m.cfg.Device}).deviceID()
	if err != nil {
		return nil, fmt.Errorf("mqtt.device: %w", err)
	}
	m.device = dev
	if err := mqtt.ValidatePrefix(m.cfg.TopicPrefix); err != nil {
		return nil, fmt.Errorf("mqtt.topic_prefix: %w", err)
	}
	if m.cfg.Broker == "" && m.cfg.BrokerUsers != "" {
		if m.users, err = broker.LoadUsers(m.cfg.BrokerUsers); err != nil {
			return nil, fmt.Errorf("mqtt.broker_users: %w", err)
		}
	}
	if m.cfg.Broker != "" {
		if _, _, err := mqtt.ParseBrokerURL(m.cfg.Broker); err != nil {
			return nil, fmt.Errorf("mqtt.broker: %w", err)
		}
	}
	return m, nil
}

func (m *mqttInfra) Name() string { return "mqtt" }

func (m *mqttInfra) Start(ctx context.Context) error {
	if m.cfg.Disabled {
		m.log.Info().Msg("MQTT disabled (mqtt.disabled): agents take tasks over HTTP only")
		return nil
	}
	m.url = m.cfg.Broker
	if m.url == "" {
		b, err := broker.Start(ctx, broker.Config{Listen: m.cfg.BrokerListen, DataDir: m.data, Users: m.users,
			TopicPrefix: m.cfg.TopicPrefix, Log: m.log})
		switch {
		case err == nil:
			m.b = b
			m.url = b.URL()
		case errors.Is(err, broker.ErrAddrInUse) && m.cfg.BrokerListen == broker.DefaultListen:
			m.log.Warn().Str("addr", broker.DefaultListen).Msg("embedded broker not started: the address is taken; using the broker already listening there")
			m.url = "tcp://" + broker.DefaultListen
		default:
			return err
		}
	}
	return m.connect()
}

// connect starts the daemon's own client; it connects in the background and
// never delays the boot.
func (m *mqttInfra) connect() error {
	u, secure, err := mqtt.ParseBrokerURL(m.url)
	if err != nil {
		return err
	}
	opts := paho.NewClientOptions().AddBroker(u.String()).
		SetClientID(mqtt.ClientID(m.device, "daemon")).
		SetCleanSession(true).SetProtocolVersion(4).
		SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(2*time.Second).SetMaxReconnectInterval(30*time.Second).
		SetBinaryWill(mqtt.StatusTopic(m.cfg.TopicPrefix, m.device),
			mqtt.StatusPayload("offline", m.device, version, nil, "connection lost", time.Now()), 1, true).
		SetOnConnectHandler(func(c paho.Client) {
			m.up.Store(true)
			if m.everUp.Swap(true) {
				m.reconnect.Add(1)
			}
			m.publishStatus()
			if m.fleetDev != nil {
				m.fleetDev.Subscribe(c)
				m.reporter.Attach(c)
				m.updates.Attach(c, m.cfg.TopicPrefix, m.device)
			}
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			m.up.Store(false)
			m.log.Warn().Err(err).Msg("daemon MQTT connection lost; reconnecting")
		})
	if m.cfg.Username != "" {
		opts.SetUsername(m.cfg.Username).SetPassword(m.cfg.Password)
	}
	if secure {
		tc, err := mqtt.TLSConfig(u, secure, m.cfg.CA, m.cfg.Cert, m.cfg.Key)
		if err != nil {
			return err
		}
		opts.SetTLSConfig(tc)
	}
	m.client = paho.NewClient(opts)
	if m.reporter != nil {
		ctx, cancel := context.WithCancel(context.Background())
		m.stopFleet = cancel
		go m.reporter.Run(ctx)
	}
	m.client.Connect() // with ConnectRetry it keeps trying; not awaited
	return nil
}

// AgentArgs hands mqtt.* to an agent as the flags of `openstarry run`.
// Workers never take fleet tasks: those are the master's to delegate.
func (m *mqttInfra) AgentArgs(agentID, role string) (args, env []string) {
	if m.cfg.Disabled {
		return []string{"--no-mqtt"}, nil
	}
	args = []string{"--broker", m.url, "--device", m.device, "--topic-prefix", m.cfg.TopicPrefix, "--fleet-group", m.cfg.FleetGroup}
	if role != control.RoleMaster || m.cfg.NoFleet {
		args = append(args, "--no-fleet")
	}
	if m.cfg.Username != "" {
		args = append(args, "--mqtt-username", m.cfg.Username)
	}
	if m.cfg.Password != "" {
		env = append(env, "OPENSTARRY_MQTT_PASSWORD="+m.cfg.Password)
	}
	for _, f := range []struct{ flag, v string }{{"--mqtt-ca", m.cfg.CA}, {"--mqtt-cert", m.cfg.Cert}, {"--mqtt-key", m.cfg.Key}} {
		if f.v != "" {
			args = append(args, f.flag, f.v)
		}
	}
	return args, env
}

// publishStatus publishes the device online, with its running agents,
// retained, without waiting. Each publication reads the list as it is
// when it is queued, under the lock, so the last one queued is the latest.
func (m *mqttInfra) publishStatus() {
	m.mu.Lock()
	defer m.mu.Unlock()
	agents := make([]string, 0, len(m.running))
	for id := range m.running {
		agents = append(agents, id)
	}
	slices.Sort(agents)
	m.client.Publish(mqtt.StatusTopic(m.cfg.TopicPrefix, m.device), 1, true,
		mqtt.StatusPayload("online", m.device, version, agents, "", time.Now()))
}

// Close marks the device offline (retained) and disconnects; the agents
// have stopped by then.
func (m *mqttInfra) Close() error {
	if m.stopFleet != nil {
		m.stopFleet()
		m.fleetDev.Wait()
	}
	if m.client != nil {
		if m.client.IsConnectionOpen() {
			tok := m.client.Publish(mqtt.StatusTopic(m.cfg.TopicPrefix, m.device), 1, true,
				mqtt.StatusPayload("offline", m.device, version, nil, "stopped", time.Now()))
			tok.WaitTimeout(2 * time.Second)
		}
		m.client.Disconnect(250)
	}
	if m.b != nil {
		return m.b.Close()
	}
	return nil
}

// Status reports the daemon's MQTT connection for /healthz and /metrics.
func (m *mqttInfra) Status() daemon.InfraStatus {
	if m.cfg.Disabled {
		return daemon.InfraStatus{Up: true, Detail: "disabled"}
	}
	conn := m.up.Load()
	st := daemon.InfraStatus{Up: true, Gauges: map[string]float64{"mqtt_connected": b2f(conn)}}
	if m.b != nil {
		st.Gauges["mqtt_embedded_broker"] = 1
	}
	if !conn {
		st.Detail = "not connected to " + m.url
	}
	return st
}

// agentState is the retained payload of {prefix}/{device}/agents/{agent}/state.
type agentState struct {
	Agent     string `json:"agent"`
	Role      string `json:"role"`
	State     string `json:"state"`
	PID       int    `json:"pid,omitempty"`
	Restarts  int    `json:"restarts"`
	LastError string `json:"last_error,omitempty"`
	Time      string `json:"time"`
}

// publishState publishes the settled states (running, crashloop, stopped)
// of an agent, retained, QoS 1, without waiting.
func (m *mqttInfra) publishState(a control.AgentInfo) {
	if m.client == nil {
		return
	}
	switch a.State {
	case control.StateRunning, control.StateCrashloop, control.StateStopped:
	default:
		return
	}
	b, _ := json.Marshal(agentState{Agent: a.ID, Role: a.Role, State: a.State, PID: a.PID, Restarts: a.Restarts,
		LastError: a.LastError, Time: a.Since.UTC().Format(time.RFC3339)})
	m.client.Publish(m.cfg.TopicPrefix+"/"+m.device+"/agents/"+a.ID+"/state", 1, true, b)
	m.mu.Lock()
	changed := m.running[a.ID] != (a.State == control.StateRunning)
	if a.State == control.StateRunning {
		m.running[a.ID] = true
	} else {
		delete(m.running, a.ID)
	}
	m.mu.Unlock()
	if changed {
		m.publishStatus() // the list as it is then: the last publication is the latest
	}
	if m.reporter != nil {
		m.reporter.Poke()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Interface guards.
var (
	_ daemon.Infrastructure = (*mqttInfra)(nil)
	_ daemon.StatusReporter = (*mqttInfra)(nil)
)
