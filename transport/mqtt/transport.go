package mqtt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// transport is the transport.mqtt plugin: one agent's connection to MQTT,
// with the embedded broker (infra.broker) when no hub is configured. It is
// the runtime's Outbox from the start; results handed over before the
// client exists wait in order.
type transport struct {
	cfg    Config        // Broker empty: the embedded broker's
	broker plugin.Broker // nil with a hub

	mu     sync.Mutex // guards client and early
	client *Client
	early  []agent.Result
	claims Claims // one run per fleet task id across the fleet; nil without fleet tasks

	doneMu   sync.Mutex    // guards doneIDs
	doneIDs  []string      // tasks whose results were handed over, for claims.Done
	doneWake chan struct{} // wakes claimsDone
}

// openTransport checks the mqtt.* settings; it does no I/O but reading the
// embedded broker's users file.
func openTransport(c *config.Config, env plugin.TransportEnv) (plugin.Transport, error) {
	m := c.MQTT
	device, err := DeviceID(m.Device)
	if err != nil {
		return nil, err
	}
	t := &transport{cfg: Config{
		Broker: m.Broker, Device: device, Agent: env.AgentID, TopicPrefix: m.TopicPrefix,
		FleetGroup: m.FleetGroup, NoFleet: m.NoFleet || env.Role == design.RoleWorker && !m.FleetWorkers, NoDeviceStatus: env.DaemonChild,
		Username: m.Username, Password: m.Password, CAFile: m.CA, CertFile: m.Cert, KeyFile: m.Key,
		MaxTaskBytes: env.MaxTaskBytes, Version: env.Version, Log: env.Log,
		StateDir: filepath.Join(env.DataDir, "agents", env.AgentID),
	}}
	if !t.cfg.NoFleet {
		if _, err := claimsFactory(); err != nil {
			return nil, err
		}
	}
	check := t.cfg
	if m.Broker == "" {
		if m.CA != "" || m.Cert != "" || m.Key != "" {
			return nil, errors.New("--mqtt-ca, --mqtt-cert and --mqtt-key need --broker ssl://… (the embedded broker listens without TLS)")
		}
		if err := config.CheckBrokerListen(m.BrokerListen, m.Username); err != nil {
			return nil, fmt.Errorf("--broker-listen %w", err)
		}
		check.Broker = "tcp://" + plugin.DefaultBrokerListen
		if err := m.ValidateBroker(); err != nil {
			return nil, err
		}
		if t.broker, err = plugin.NewBroker(plugin.BrokerConfig{Listen: m.BrokerListen, UsersFile: m.BrokerUsers,
			DataDir: env.DataDir, TopicPrefix: m.TopicPrefix, Log: env.Log,
			MaxPacketBytes: m.BrokerMaxPacketBytes, ConnectTimeout: m.BrokerConnectTimeout,
			MaxConnections: m.BrokerMaxConnections, MaxRetainedBytes: int64(m.BrokerMaxRetainedBytes)}); err != nil {
			return nil, err
		}
	} else if (m.BrokerListen != "" && m.BrokerListen != plugin.DefaultBrokerListen) || m.BrokerUsers != "" {
		return nil, errors.New("--broker-listen and --broker-users configure the embedded broker; they cannot be used with --broker")
	}
	if _, err := New(check); err != nil { // validation only
		return nil, err
	}
	return t, nil
}

// Progress is the runtime's OnProgress.
func (t *transport) Progress(taskID string, percent int, phase string) {
	t.mu.Lock()
	c := t.client
	t.mu.Unlock()
	if c != nil {
		c.Progress(taskID, percent, phase)
	}
}

// Deliver hands results to the client, or keeps them until it exists.
func (t *transport) Deliver(results []agent.Result) {
	if t.claims != nil {
		// Marked done by claimsDone, not here: Deliver runs on the
		// runtime's goroutine, which a done claim's publication (and the
		// unsubscription it waits for) would hold up at every fleet result.
		t.doneMu.Lock()
		for _, r := range results {
			t.doneIDs = append(t.doneIDs, r.TaskID)
		}
		t.doneMu.Unlock()
		select {
		case t.doneWake <- struct{}{}:
		default:
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client != nil {
		t.client.Deliver(results)
		return
	}
	t.early = append(t.early, results...)
}

// Start starts the embedded broker when no hub is configured, then the
// client.
func (t *transport) Start(ctx context.Context, rt *agent.Runtime) error {
	cfg := t.cfg
	if t.broker != nil {
		if err := t.broker.Start(ctx); err != nil {
			return err
		}
		cfg.Broker = t.broker.URL()
	}
	if !cfg.NoDeviceStatus {
		owned, err := t.daemonOwnsStatus(ctx, cfg)
		if err != nil {
			return err // refused: the login is tried once
		}
		cfg.NoDeviceStatus = owned
	}
	if !cfg.NoFleet {
		makeClaims, err := claimsFactory()
		if err != nil {
			return err
		}
		claims, err := makeClaims(cfg)
		if err != nil {
			return err
		}
		t.doneWake = make(chan struct{}, 1)
		go t.claimsDone(ctx, claims)
		t.claims, cfg.FleetGate = claims, claims
	}
	c, err := New(cfg)
	if err != nil {
		return err
	}
	t.mu.Lock()
	c.Deliver(t.early) // under mu: nothing handed over later can overtake them
	t.early = nil
	t.client = c
	t.mu.Unlock()
	if err := c.Start(ctx, rt); err != nil {
		return err
	}
	if t.claims != nil {
		t.claims.Connect() // once the hub took the agent's login
	}
	return nil
}

// claimsDone tells the claims of every result Deliver handed over, in the
// order they came, until ctx ends; then it tells them the rest and closes
// them.
func (t *transport) claimsDone(ctx context.Context, claims Claims) {
	defer claims.Close()
	var ids []string
	for stop := false; !stop; {
		select {
		case <-ctx.Done():
			stop = true
		case <-t.doneWake:
		}
		t.doneMu.Lock()
		ids, t.doneIDs = t.doneIDs, ids[:0]
		t.doneMu.Unlock()
		for _, id := range ids {
			claims.Done(id)
		}
		clear(ids)
	}
}

// daemonOwnsStatus reports whether a daemon says, in the retained status
// of this agent's device, that it runs as the device: then this agent,
// run on its own with the daemon's device id, leaves the status alone (no
// online, no offline, no last will), for the daemon owns it. A broker that
// cannot be asked now leaves the status to this agent; the daemon, when it
// runs, replaces what the agent publishes (Infra).
func (t *transport) daemonOwnsStatus(ctx context.Context, cfg Config) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*probeConnectTimeout)
	defer cancel()
	pc, err := Dial(ctx, DialOptions{Broker: cfg.Broker, Username: cfg.Username, Password: cfg.Password,
		CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Timeout: probeConnectTimeout})
	if err != nil {
		if errors.Is(err, ErrBadCredentials) || errors.Is(err, ErrNotAuthorized) || errors.Is(err, ErrTLS) || errors.Is(err, ErrRefused) {
			return false, err // what the client's own login would say, at once
		}
		return false, nil // unreachable: the client retries in the background
	}
	defer pc.Disconnect(50)
	prefix := cfg.TopicPrefix
	if prefix == "" {
		prefix = DefaultTopicPrefix
	}
	st, err := ReadStatus(ctx, pc, prefix, cfg.Device, probeConnectTimeout)
	if err != nil || st == nil || st.Owner != OwnerDaemon || st.State != "online" {
		return false, nil
	}
	cfg.Log.Info().Str("component", "mqtt").Str("device", cfg.Device).Int("daemon_pid", st.PID).Str("daemon_host", st.Host).
		Msgf("mqtt: a daemon (pid %d on host %s) runs as device %s and owns its status; this agent leaves %s alone", st.PID, st.Host, cfg.Device, StatusTopic(prefix, cfg.Device))
	return true, nil
}

// Close publishes what it can within a few seconds, disconnects, and stops
// the embedded broker.
func (t *transport) Close() error {
	t.mu.Lock()
	c := t.client
	t.mu.Unlock()
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = c.Close(ctx)
		cancel()
	}
	if t.broker != nil {
		_ = t.broker.Close()
	}
	return nil
}

// Interface guards.
var _ plugin.Transport = (*transport)(nil)
