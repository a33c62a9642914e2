package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
)

// DefaultBrokerListen is the embedded broker's default address: loopback
// only. When it is taken, the broker already listening there is used.
const DefaultBrokerListen = "127.0.0.1:1883"

// BrokerConfig configures the embedded MQTT broker (plugin infra.broker).
type BrokerConfig struct {
	// Listen is the TCP address; "" is DefaultBrokerListen. Port 0 picks
	// a free port.
	Listen string
	// UsersFile is the JSON users file (hashed passwords, device ACLs);
	// "": only loopback clients may connect.
	UsersFile string
	// DataDir holds the broker's persistent sessions; "": none.
	DataDir     string
	TopicPrefix string
	Log         zerolog.Logger
	// The broker's bounds (mqtt.broker_max_packet_bytes,
	// mqtt.broker_connect_timeout, mqtt.broker_max_connections,
	// mqtt.broker_max_retained_bytes); zero: the broker's default.
	MaxPacketBytes   int
	ConnectTimeout   time.Duration
	MaxConnections   int
	MaxRetainedBytes int64
}

// Broker is the embedded MQTT broker of a device with no hub.
type Broker interface {
	// Start starts the broker. When Listen is the default address and
	// another process holds it, Start logs a warning and the broker
	// listening there is used instead (Embedded then reports false);
	// any other failure is returned.
	Start(ctx context.Context) error
	// URL is where clients connect (tcp://HOST:PORT), once started.
	URL() string
	// Embedded reports whether this process runs the broker.
	Embedded() bool
	// Close stops the broker this process runs, if any.
	Close() error
}

// BrokerOpener checks a broker's configuration (reading the files it names)
// and returns it unstarted.
type BrokerOpener func(cfg BrokerConfig) (Broker, error)

// NewBroker returns the embedded broker of the infra.broker plugin,
// unstarted.
func NewBroker(cfg BrokerConfig) (Broker, error) {
	info, ok := Lookup(string(KindInfra) + ".broker")
	if !ok {
		return nil, errors.New("this build has no embedded MQTT broker: configure a hub broker URL")
	}
	return info.New.(BrokerOpener)(cfg)
}

// TransportEnv is what a task transport is opened with beside the
// configuration.
type TransportEnv struct {
	AgentID      string
	DataDir      string
	MaxTaskBytes int // the template's limits.max_task_bytes
	// DaemonChild says the agent runs under the daemon, which owns the
	// device-wide topics (status); an agent run on its own owns them.
	DaemonChild bool
	// Role is the agent's template role (design.RoleMaster, RoleWorker):
	// workers take no fleet tasks unless mqtt.fleet_workers is set.
	Role    string
	Version string
	Log     zerolog.Logger
}

// Transport carries one agent's tasks in and its results out (plugin kind
// transport). It is the runtime's Outbox from the moment it is opened:
// results handed over before Start wait, in order.
type Transport interface {
	agent.Outbox
	// Progress is the runtime's OnProgress.
	Progress(taskID string, percent int, phase string)
	// Start connects and feeds rt. A refusal that retrying cannot heal
	// (credentials, TLS) is returned; an unreachable peer is retried in
	// the background.
	Start(ctx context.Context, rt *agent.Runtime) error
	// Close delivers what it can within a few seconds and disconnects.
	Close() error
}

// TransportOpener checks the configuration (its own section of it) and
// returns the transport unstarted.
type TransportOpener func(cfg *config.Config, env TransportEnv) (Transport, error)

// OpenTransport returns the transport of plugin transport.{name}, unstarted.
func OpenTransport(name string, cfg *config.Config, env TransportEnv) (Transport, error) {
	info, ok := Lookup(string(KindTransport) + "." + name)
	if !ok {
		return nil, fmt.Errorf("this build has no %s transport", name)
	}
	return info.New.(TransportOpener)(cfg, env)
}

// InfraStatus is what an infrastructure plugin says of its health, for the
// daemon's /healthz and /metrics.
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
