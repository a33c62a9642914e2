package mqtt

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Infra is the daemon's MQTT infrastructure: in boot phase 1 it starts the
// embedded broker (no hub configured) and connects the daemon's own client,
// which owns the device's status topic ({prefix}/{device}/status: online
// with the running agents, offline when the daemon stops, and offline as
// its last will) and publishes agent state changes (crashloop) retained on
// {prefix}/{device}/agents/{agent}/state. The agents get the broker's URL
// and the rest of mqtt.* as their flags (AgentArgs), and leave the status
// topic alone.
type Infra struct {
	cfg     config.MQTT
	data    string
	version string
	log     zerolog.Logger
	device  string

	broker plugin.Broker // nil with a hub or MQTT disabled
	url    string
	client paho.Client
	up     atomic.Bool
	everUp atomic.Bool

	mu      sync.Mutex      // guards running and orders the status publications
	running map[string]bool // agents in state running, for the status topic

	self     Instance    // this daemon, in the status it owns and in probe answers
	closing  atomic.Bool // Close has begun: the status watch stands down
	lastFix  atomic.Int64
	warnedOf sync.Map // instance ids of other daemons already logged

	att       Attachment   // rides on the client (the fleet), or nil
	reconnect atomic.Int64 // connections after the first
	stopAtt   context.CancelFunc
}

// Attachment is a service that rides on the daemon's connection: the
// fleet's signed commands and telemetry (transport/fleet).
type Attachment interface {
	// Attach is called on every connection, the first and each
	// reconnection.
	Attach(c paho.Client)
	// Run runs from Start until Close.
	Run(ctx context.Context)
	// Changed is told that an agent's state changed.
	Changed()
	// Wait waits, at Close, for the work Attach started.
	Wait()
}

// InfraOptions configure the daemon's MQTT infrastructure.
type InfraOptions struct {
	Config  config.MQTT
	DataDir string
	Version string // reported on the status topic
	Log     zerolog.Logger
}

// NewInfra checks the mqtt.* settings; it starts nothing.
func NewInfra(o InfraOptions) (*Infra, error) {
	m := &Infra{cfg: o.Config, data: o.DataDir, version: o.Version, log: o.Log, running: map[string]bool{},
		self: NewInstance(absPath(o.DataDir))}
	if m.cfg.Disabled {
		return m, nil
	}
	dev, err := DeviceID(m.cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("mqtt.device: %w", err)
	}
	m.device = dev
	if err := ValidatePrefix(m.cfg.TopicPrefix); err != nil {
		return nil, fmt.Errorf("mqtt.topic_prefix: %w", err)
	}
	if m.cfg.Broker != "" {
		if _, _, err := ParseBrokerURL(m.cfg.Broker); err != nil {
			return nil, fmt.Errorf("mqtt.broker: %w", err)
		}
		return m, nil
	}
	m.broker, err = plugin.NewBroker(plugin.BrokerConfig{Listen: m.cfg.BrokerListen, UsersFile: m.cfg.BrokerUsers,
		DataDir: m.data, TopicPrefix: m.cfg.TopicPrefix, Log: m.log,
		MaxPacketBytes: m.cfg.BrokerMaxPacketBytes, ConnectTimeout: m.cfg.BrokerConnectTimeout,
		MaxConnections: m.cfg.BrokerMaxConnections, MaxRetainedBytes: int64(m.cfg.BrokerMaxRetainedBytes)})
	if err != nil {
		return nil, fmt.Errorf("mqtt.broker_users: %w", err)
	}
	return m, nil
}

// Device is the device id of the topics ("" when MQTT is disabled).
func (m *Infra) Device() string { return m.device }

// Disabled reports mqtt.disabled.
func (m *Infra) Disabled() bool { return m.cfg.Disabled }

// Reconnects counts the connections after the first.
func (m *Infra) Reconnects() int64 { return m.reconnect.Load() }

// Attach adds a service that rides on the connection; call it before Start.
func (m *Infra) Attach(a Attachment) { m.att = a }

func (m *Infra) Name() string { return "mqtt" }

// Start starts the embedded broker when no hub is configured, then the
// daemon's client.
func (m *Infra) Start(ctx context.Context) error {
	if m.cfg.Disabled {
		m.log.Info().Msg("MQTT disabled (mqtt.disabled): agents take tasks over HTTP only")
		return nil
	}
	m.url = m.cfg.Broker
	if m.broker != nil {
		if err := m.broker.Start(ctx); err != nil {
			return err
		}
		m.url = m.broker.URL()
	}
	if err := m.checkDevice(ctx); err != nil {
		return err
	}
	return m.connect()
}

// Probe bounds of checkDevice.
const (
	probeConnectTimeout = 5 * time.Second
	probeAnswerTimeout  = 3 * time.Second
)

// checkDevice refuses to start a second daemon as a device id that a live
// daemon already runs as (CheckDevice), before this one takes the
// device's client id and status. A hub that cannot be reached now is not
// asked: the daemon starts, as it always does without its hub.
func (m *Infra) checkDevice(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeConnectTimeout+probeAnswerTimeout+probeConnectTimeout)
	defer cancel()
	pc, err := Dial(ctx, DialOptions{Broker: m.url, Username: m.cfg.Username, Password: m.cfg.Password,
		CAFile: m.cfg.CA, CertFile: m.cfg.Cert, KeyFile: m.cfg.Key, Timeout: probeConnectTimeout})
	if err != nil {
		m.log.Warn().Err(err).Msg("mqtt: cannot ask the hub whether another daemon runs as this device; starting")
		return nil
	}
	defer pc.Disconnect(50)
	stale, err := CheckDevice(ctx, pc, m.cfg.TopicPrefix, m.device, m.self, probeAnswerTimeout)
	switch {
	case errors.Is(err, ErrDeviceOnline):
		m.log.Error().Str("device", m.device).Msg("mqtt: refused to start: " + err.Error())
		return err
	case err != nil:
		m.log.Warn().Err(err).Msg("mqtt: cannot ask the hub whether another daemon runs as this device; starting")
	case stale != nil:
		m.log.Warn().Str("device", m.device).Str("other_instance", stale.Instance).Int("other_pid", stale.PID).Str("other_host", stale.Host).
			Msgf("mqtt: the hub says device %s is online, but its daemon (pid %d on host %s) did not answer within %s: its status is stale (it died and its last will is not out yet); taking the device over",
				m.device, stale.PID, stale.Host, probeAnswerTimeout)
	}
	return nil
}

// watchStatus keeps the device's status the daemon's: a status that
// another process published there (an agent's last will, an agent run on
// its own with this device id stopping, an earlier boot's late will) is
// replaced at once, at most once a second, by the daemon's own.
func (m *Infra) watchStatus(c paho.Client) {
	topic := StatusTopic(m.cfg.TopicPrefix, m.device)
	c.Subscribe(topic, 1, func(_ paho.Client, msg paho.Message) {
		if m.closing.Load() {
			return
		}
		var s StatusMessage
		if len(msg.Payload()) > 0 && json.Unmarshal(msg.Payload(), &s) == nil && s.Instance == m.self.ID {
			return // its own
		}
		if s.Owner == OwnerDaemon && s.State == "online" {
			if _, seen := m.warnedOf.LoadOrStore(s.Instance, true); !seen {
				m.log.Error().Str("other_instance", s.Instance).Int("other_pid", s.PID).Str("other_host", s.Host).
					Msgf("mqtt: another daemon (pid %d on host %s) publishes the status of device %s: two daemons run as this device; stop one, or give it its own mqtt.device",
						s.PID, s.Host, m.device)
			}
			return // two daemons would only take turns
		}
		now := time.Now().UnixNano()
		if last := m.lastFix.Load(); now-last < int64(time.Second) || !m.lastFix.CompareAndSwap(last, now) {
			return
		}
		m.log.Info().Str("owner", s.Owner).Str("state", s.State).Str("reason", s.Reason).Int("pid", s.PID).
			Msg("mqtt: the device's status was overwritten by another process; the daemon publishes its own again")
		m.publishStatus()
	})
}

// connect starts the daemon's own client; it connects in the background and
// never delays the boot.
func (m *Infra) connect() error {
	u, secure, err := ParseBrokerURL(m.url)
	if err != nil {
		return err
	}
	opts := paho.NewClientOptions().AddBroker(u.String()).
		SetClientID(ClientID(m.device, "daemon")).
		SetCleanSession(true).SetProtocolVersion(4).
		SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(2*time.Second).SetMaxReconnectInterval(30*time.Second).
		SetBinaryWill(StatusTopic(m.cfg.TopicPrefix, m.device), m.statusPayload("offline", nil, "connection lost"), 1, true).
		SetOnConnectHandler(func(c paho.Client) {
			m.up.Store(true)
			if m.everUp.Swap(true) {
				m.reconnect.Add(1)
			}
			m.publishStatus()
			m.watchStatus(c)
			(&prober{prefix: m.cfg.TopicPrefix, device: m.device, self: m.self, onProbe: func(from Instance) {
				m.log.Warn().Str("other_instance", from.ID).Int("other_pid", from.PID).Str("other_host", from.Host).Str("other_data", from.Data).
					Msgf("mqtt: another daemon (%s) is starting as device %s; this daemon answered, and it refuses to start", from, m.device)
			}}).subscribe(c)
			if m.att != nil {
				m.att.Attach(c)
			}
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			m.up.Store(false)
			m.log.Warn().Err(err).Msg("daemon MQTT connection lost; reconnecting")
		})
	if m.cfg.Username != "" {
		opts.SetUsername(m.cfg.Username).SetPassword(m.cfg.Password)
	}
	var tc *tls.Config
	if secure {
		if tc, err = TLSConfig(u, secure, m.cfg.CA, m.cfg.Cert, m.cfg.Key); err != nil {
			return err
		}
		opts.SetTLSConfig(tc)
	}
	opts.SetCustomOpenConnectionFn(Opener(tc))
	m.client = paho.NewClient(opts)
	if m.att != nil {
		ctx, cancel := context.WithCancel(context.Background())
		m.stopAtt = cancel
		go m.att.Run(ctx)
	}
	m.client.Connect() // with ConnectRetry it keeps trying; not awaited
	return nil
}

// AgentArgs hands mqtt.* to an agent as the flags of `openstarry run`,
// encoded by the configuration table (config.Config.AgentArgs): the
// broker's URL as it was started, the device id as resolved, the password
// in the environment. Workers take no fleet tasks (those are the master's
// to delegate) unless mqtt.fleet_workers says they do.
func (m *Infra) AgentArgs(agentID, role string) (args, env []string) {
	c := config.Config{MQTT: config.MQTT{Disabled: true}}
	if !m.cfg.Disabled {
		c.MQTT = m.cfg
		c.MQTT.Broker, c.MQTT.Device = m.url, m.device
		c.MQTT.NoFleet = m.cfg.NoFleet || role != design.RoleMaster && !m.cfg.FleetWorkers
	}
	return c.AgentArgs()
}

// publishStatus publishes the device online, with its running agents,
// retained, without waiting. Each publication reads the list as it is
// when it is queued, under the lock, so the last one queued is the latest.
func (m *Infra) publishStatus() {
	m.mu.Lock()
	defer m.mu.Unlock()
	agents := make([]string, 0, len(m.running))
	for id := range m.running {
		agents = append(agents, id)
	}
	slices.Sort(agents)
	m.client.Publish(StatusTopic(m.cfg.TopicPrefix, m.device), 1, true, m.statusPayload("online", agents, ""))
}

// statusPayload is the device's status as this daemon owns it.
func (m *Infra) statusPayload(state string, agents []string, reason string) []byte {
	return StatusMessage{State: state, Device: m.device, Version: m.version, Agents: agents, Reason: reason}.
		ownedBy(OwnerDaemon, m.self).Payload(time.Now())
}

// absPath is p made absolute, or p when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// Close marks the device offline (retained) and disconnects; the agents
// have stopped by then.
func (m *Infra) Close() error {
	m.closing.Store(true)
	if m.stopAtt != nil {
		m.stopAtt()
		m.att.Wait()
	}
	if m.client != nil {
		if m.client.IsConnectionOpen() {
			tok := m.client.Publish(StatusTopic(m.cfg.TopicPrefix, m.device), 1, true, m.statusPayload("offline", nil, "stopped"))
			tok.WaitTimeout(2 * time.Second)
		}
		m.client.Disconnect(250)
	}
	if m.broker != nil {
		return m.broker.Close()
	}
	return nil
}

// Status reports the daemon's MQTT connection for /healthz and /metrics.
func (m *Infra) Status() plugin.InfraStatus {
	if m.cfg.Disabled {
		return plugin.InfraStatus{Up: true, Off: true, Detail: "disabled"}
	}
	conn := m.up.Load()
	st := plugin.InfraStatus{Up: true, Gauges: map[string]float64{"mqtt_connected": b2f(conn)}}
	if m.broker != nil && m.broker.Embedded() {
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

// PublishState publishes the settled states (running, crashloop, stopped)
// of an agent, retained, QoS 1, without waiting: the daemon's OnAgentState.
func (m *Infra) PublishState(a control.AgentInfo) {
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
	if m.att != nil {
		m.att.Changed()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
