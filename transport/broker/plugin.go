package broker

import (
	"context"
	"errors"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "infra.broker",
		Description: "embedded MQTT broker (mochi-mqtt), started when no hub is configured",
		New:         plugin.BrokerOpener(newPlugin),
	})
}

// embedded is the infra.broker plugin: the broker this process starts, or
// the one already holding the default address.
type embedded struct {
	cfg   plugin.BrokerConfig
	users []User
	b     *Broker
	url   string
}

// newPlugin reads the users file; it starts nothing.
func newPlugin(cfg plugin.BrokerConfig) (plugin.Broker, error) {
	e := &embedded{cfg: cfg}
	if cfg.UsersFile != "" {
		var err error
		if e.users, err = LoadUsers(cfg.UsersFile); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Start starts the broker. When the default address is taken, the broker
// listening there is used: a second openstarry on the device (run beside
// the daemon) shares the first one's broker.
func (e *embedded) Start(ctx context.Context) error {
	b, err := Start(ctx, Config{Listen: e.cfg.Listen, DataDir: e.cfg.DataDir, Users: e.users,
		TopicPrefix: e.cfg.TopicPrefix, Log: e.cfg.Log,
		MaxPacketBytes: e.cfg.MaxPacketBytes, ConnectTimeout: e.cfg.ConnectTimeout,
		MaxConnections: e.cfg.MaxConnections, MaxRetainedBytes: e.cfg.MaxRetainedBytes})
	switch {
	case err == nil:
		e.b = b
		e.url = b.URL()
	case errors.Is(err, ErrAddrInUse) && (e.cfg.Listen == "" || e.cfg.Listen == DefaultListen):
		e.cfg.Log.Warn().Str("addr", DefaultListen).
			Msgf("embedded broker not started: %s is taken; using the broker already listening there", DefaultListen)
		e.url = "tcp://" + DefaultListen
	default:
		return err
	}
	return nil
}

func (e *embedded) URL() string    { return e.url }
func (e *embedded) Embedded() bool { return e.b != nil }

func (e *embedded) Close() error {
	if e.b == nil {
		return nil
	}
	return e.b.Close()
}

// Interface guards.
var _ plugin.Broker = (*embedded)(nil)
