package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// mqttFlags configure the MQTT client of run (and the broker it may embed)
// and of task send.
type mqttFlags struct {
	broker       string
	brokerListen string
	brokerUsers  string
	device       string
	username     string
	password     string
	ca           string
	cert         string
	key          string
	prefix       string
	fleetGroup   string
	noFleet      bool
	noMQTT       bool
	// daemonChild: the agent runs under the daemon, which owns the
	// device's status topic (set by `core`, not a flag).
	daemonChild bool
}

// bindClient adds the flags every MQTT client needs.
func (f *mqttFlags) bindClient(fl *pflag.FlagSet, brokerHelp string) {
	fl.StringVar(&f.broker, "broker", envOr("OPENSTARRY_BROKER", ""), brokerHelp+" (env OPENSTARRY_BROKER)")
	fl.StringVar(&f.device, "device", envOr("OPENSTARRY_DEVICE", ""), "device id in the topics; default the host name (env OPENSTARRY_DEVICE)")
	fl.StringVar(&f.username, "mqtt-username", envOr("OPENSTARRY_MQTT_USERNAME", ""), "MQTT user name (env OPENSTARRY_MQTT_USERNAME)")
	fl.StringVar(&f.password, "mqtt-password", envOr("OPENSTARRY_MQTT_PASSWORD", ""), "MQTT password; prefer the environment, a flag shows in ps (env OPENSTARRY_MQTT_PASSWORD)")
	fl.StringVar(&f.ca, "mqtt-ca", envOr("OPENSTARRY_MQTT_CA", ""), "PEM file of the CA that signed the broker's certificate; default the system roots (env OPENSTARRY_MQTT_CA)")
	fl.StringVar(&f.cert, "mqtt-cert", envOr("OPENSTARRY_MQTT_CERT", ""), "PEM client certificate for TLS (env OPENSTARRY_MQTT_CERT)")
	fl.StringVar(&f.key, "mqtt-key", envOr("OPENSTARRY_MQTT_KEY", ""), "PEM key of --mqtt-cert (env OPENSTARRY_MQTT_KEY)")
	fl.StringVar(&f.prefix, "topic-prefix", envOr("OPENSTARRY_MQTT_TOPIC_PREFIX", mqtt.DefaultTopicPrefix), "first level of every topic (env OPENSTARRY_MQTT_TOPIC_PREFIX)")
}

// bind adds the flags of run.
func (f *mqttFlags) bind(fl *pflag.FlagSet) {
	f.bindClient(fl, "hub broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; empty starts the embedded broker")
	fl.StringVar(&f.brokerListen, "broker-listen", envOr("OPENSTARRY_BROKER_LISTEN", ""), "address of the embedded broker (when --broker is empty); default "+broker.DefaultListen+", and if that is taken, the broker already listening there is used (env OPENSTARRY_BROKER_LISTEN)")
	fl.StringVar(&f.brokerUsers, "broker-users", envOr("OPENSTARRY_BROKER_USERS", ""), "JSON users file of the embedded broker (hashed passwords, device ACLs); without it only loopback clients can connect (env OPENSTARRY_BROKER_USERS)")
	fl.StringVar(&f.fleetGroup, "fleet-group", envOr("OPENSTARRY_MQTT_FLEET_GROUP", mqtt.DefaultFleetGroup), "shared-subscription group of the fleet task topic (env OPENSTARRY_MQTT_FLEET_GROUP)")
	fl.BoolVar(&f.noFleet, "no-fleet", envBool("OPENSTARRY_MQTT_NO_FLEET"), "do not take tasks from the fleet topic (env OPENSTARRY_MQTT_NO_FLEET)")
	fl.BoolVar(&f.noMQTT, "no-mqtt", envBool("OPENSTARRY_NO_MQTT"), "no MQTT at all: neither the embedded broker nor a client (env OPENSTARRY_NO_MQTT)")
}

func envBool(key string) bool {
	b, err := strconv.ParseBool(os.Getenv(key))
	return err == nil && b
}

// deviceID returns the --device value or the host name.
func (f *mqttFlags) deviceID() (string, error) {
	d := f.device
	if d == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("--device is not set and the host name is unknown: %w", err)
		}
		d = h
	}
	if err := agent.ValidateID(d); err != nil {
		if f.device == "" {
			return "", fmt.Errorf("the host name cannot be a device id, set --device: %w", err)
		}
		return "", fmt.Errorf("--device: %w", err)
	}
	return d, nil
}

// mqttWiring connects one agent of run to MQTT: the embedded broker when
// no hub is configured, and the client. It is the runtime's Outbox from
// the start; results handed over before the client exists wait in order.
type mqttWiring struct {
	cfg      mqtt.Config // Broker empty: the embedded broker
	listen   string
	users    []broker.User
	dataDir  string
	log      zerolog.Logger
	disabled bool

	mu     sync.Mutex // guards client and early
	client *mqtt.Client
	early  []agent.Result
	broker *broker.Broker
	claims *fleet.Claims // one run per fleet task id across the fleet
}

// newMQTTWiring checks the flags; it does no I/O but reading the users file.
func newMQTTWiring(f mqttFlags, agentID, dataDir string, maxTaskBytes int, log zerolog.Logger) (*mqttWiring, error) {
	if f.noMQTT {
		return &mqttWiring{disabled: true, log: log}, nil
	}
	device, err := f.deviceID()
	if err != nil {
		return nil, err
	}
	w := &mqttWiring{listen: f.brokerListen, dataDir: dataDir, log: log}
	w.cfg = mqtt.Config{
		Broker: f.broker, Device: device, Agent: agentID, TopicPrefix: f.prefix,
		FleetGroup: f.fleetGroup, NoFleet: f.noFleet, NoDeviceStatus: f.daemonChild, Username: f.username, Password: f.password,
		CAFile: f.ca, CertFile: f.cert, KeyFile: f.key, MaxTaskBytes: maxTaskBytes, Version: version, Log: log,
		StateDir: filepath.Join(dataDir, "agents", agentID),
	}
	check := w.cfg
	if f.broker == "" {
		if f.ca != "" || f.cert != "" || f.key != "" {
			return nil, errors.New("--mqtt-ca, --mqtt-cert and --mqtt-key need --broker ssl://… (the embedded broker listens without TLS)")
		}
		check.Broker = "tcp://" + broker.DefaultListen
		if f.brokerUsers != "" {
			if w.users, err = broker.LoadUsers(f.brokerUsers); err != nil {
				return nil, err
			}
		}
	} else if f.brokerListen != "" || f.brokerUsers != "" {
		return nil, errors.New("--broker-listen and --broker-users configure the embedded broker; they cannot be used with --broker")
	}
	if _, err := mqtt.New(check); err != nil { // validation only
		return nil, err
	}
	return w, nil
}

// Outbox is the runtime's agent.Outbox: nil when MQTT is disabled.
func (w *mqttWiring) Outbox() agent.Outbox {
	if w.disabled {
		return nil
	}
	return w
}

// Progress is the runtime's OnProgress.
func (w *mqttWiring) Progress(taskID string, percent int, phase string) {
	w.mu.Lock()
	c := w.client
	w.mu.Unlock()
	if c != nil {
		c.Progress(taskID, percent, phase)
	}
}

// Deliver hands results to the client, or keeps them until it exists.
func (w *mqttWiring) Deliver(results []agent.Result) {
	if w.claims != nil {
		for _, r := range results {
			w.claims.Done(r.TaskID)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client != nil {
		w.client.Deliver(results)
		return
	}
	w.early = append(w.early, results...)
}

// Start starts the embedded broker when no hub is configured, then the
// client. A refused login or TLS failure is returned; an unreachable hub
// is retried in the background.
func (w *mqttWiring) Start(ctx context.Context, rt *agent.Runtime) error {
	if w.disabled {
		w.log.Info().Msg("MQTT disabled (--no-mqtt): tasks only over HTTP")
		return nil
	}
	cfg := w.cfg
	if cfg.Broker == "" {
		b, err := broker.Start(ctx, broker.Config{Listen: w.listen, DataDir: w.dataDir, Users: w.users,
			TopicPrefix: cfg.TopicPrefix, Log: w.log})
		switch {
		case err == nil:
			w.broker = b
			cfg.Broker = b.URL()
		case errors.Is(err, broker.ErrAddrInUse) && w.listen == "":
			w.log.Warn().Str("addr", broker.DefaultListen).
				Msgf("embedded broker not started: %s is taken; using the broker already listening there", broker.DefaultListen)
			cfg.Broker = "tcp://" + broker.DefaultListen
		default:
			return err
		}
	}
	if !cfg.NoFleet {
		claims, err := fleet.StartClaims(fleet.ClaimsConfig{Broker: cfg.Broker, Username: cfg.Username, Password: cfg.Password,
			CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Prefix: cfg.TopicPrefix, Device: cfg.Device,
			Log: w.log.With().Str("component", "claims").Logger()})
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); claims.Close() }()
		w.claims, cfg.FleetGate = claims, claims
	}
	c, err := mqtt.New(cfg)
	if err != nil {
		return err
	}
	w.mu.Lock()
	c.Deliver(w.early) // under mu: nothing handed over later can overtake them
	w.early = nil
	w.client = c
	w.mu.Unlock()
	return mqttHint(c.Start(ctx, rt))
}

// mqttHint adds to a refused connection the flags that fix it.
func mqttHint(err error) error {
	switch {
	case errors.Is(err, mqtt.ErrBadCredentials), errors.Is(err, mqtt.ErrNotAuthorized):
		return fmt.Errorf("%w; check --mqtt-username and --mqtt-password (OPENSTARRY_MQTT_USERNAME, OPENSTARRY_MQTT_PASSWORD)", err)
	case errors.Is(err, mqtt.ErrTLS):
		return fmt.Errorf("%w; check --mqtt-ca, --mqtt-cert and --mqtt-key (OPENSTARRY_MQTT_CA, _CERT, _KEY)", err)
	}
	return err
}

// Close publishes what it can within a few seconds, disconnects, and stops
// the embedded broker.
func (w *mqttWiring) Close() {
	if w.disabled {
		return
	}
	w.mu.Lock()
	c := w.client
	w.mu.Unlock()
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = c.Close(ctx)
		cancel()
	}
	if w.broker != nil {
		_ = w.broker.Close()
	}
}
