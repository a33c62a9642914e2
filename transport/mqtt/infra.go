package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
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
	m := &Infra{cfg: o.Config, data: o.DataDir, version: o.Version, log: o.Log, running: map[string]bool{}}
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
		DataDir: m.data, TopicPrefix: m.cfg.TopicPrefix, Log: m.log})
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
	return m.connect()
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
		SetBinaryWill(StatusTopic(m.cfg.TopicPrefix, m.device),
			StatusPayload("offline", m.device, m.version, nil, "connection lost", time.Now()), 1, true).
		SetOnConnectHandler(func(c paho.Client) {
			m.up.Store(true)
			if m.everUp.Swap(true) {
				m.reconnect.Add(1)
			}
			m.publishStatus()
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
	if secure {
		tc, err := TLSConfig(u, secure, m.cfg.CA, m.cfg.Cert, m.cfg.Key)
		if err != nil {
			return err
		}
		opts.SetTLSConfig(tc)
	}
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
// in the environment. Workers never take fleet tasks: those are the
// master's to delegate.
func (m *Infra) AgentArgs(agentID, role string) (args, env []string) {
	c := config.Config{MQTT: config.MQTT{Disabled: true}}
	if !m.cfg.Disabled {
		c.MQTT = m.cfg
		c.MQTT.Broker, c.MQTT.Device = m.url, m.device
		c.MQTT.NoFleet = m.cfg.NoFleet || role != design.RoleMaster
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
	m.client.Publish(StatusTopic(m.cfg.TopicPrefix, m.device), 1, true,
		StatusPayload("online", m.device, m.version, agents, "", time.Now()))
}

// Close marks the device offline (retained) and disconnects; the agents
// have stopped by then.
func (m *Infra) Close() error {
	if m.stopAtt != nil {
		m.stopAtt()
		m.att.Wait()
	}
	if m.client != nil {
		if m.client.IsConnectionOpen() {
			tok := m.client.Publish(StatusTopic(m.cfg.TopicPrefix, m.device), 1, true,
				StatusPayload("offline", m.device, m.version, nil, "stopped", time.Now()))
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
