package mqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// Defaults of Config.
const (
	DefaultTopicPrefix          = "openstarry"
	DefaultFleetGroup           = "openstarry"
	DefaultMaxTaskBytes         = 256 << 10
	DefaultConnectTimeout       = 10 * time.Second
	DefaultKeepAlive            = 30 * time.Second
	DefaultMaxReconnectInterval = 30 * time.Second
	DefaultPublishTimeout       = 30 * time.Second
	DefaultMaxPendingSubmits    = 4096
)

// Config configures a Client.
type Config struct {
	// Broker is the broker URL: tcp://, mqtt:// (port 1883 by default),
	// ssl://, mqtts://, tls:// (port 8883 by default).
	Broker string
	// Device is this device's id (validated with agent.ValidateID).
	Device string
	// Agent is the agent's id.
	Agent string
	// TopicPrefix is the first topic level, default "openstarry".
	TopicPrefix string
	// FleetGroup is the shared-subscription group of the fleet task
	// topic, default "openstarry". NoFleet leaves the fleet topic alone.
	FleetGroup string
	NoFleet    bool
	// NoDeviceStatus leaves the device's status topic to its owner, the
	// daemon: the client sets no last will there and publishes neither
	// online nor offline. An agent run on its own owns it.
	NoDeviceStatus bool

	Username string
	Password string
	// CAFile verifies the broker's certificate (default: the system
	// roots); CertFile and KeyFile are the client certificate. TLS, when
	// set, is used instead of the three files.
	CAFile   string
	CertFile string
	KeyFile  string
	TLS      *tls.Config

	// MaxTaskBytes bounds a task payload (the template's
	// limits.max_task_bytes), default 256 KiB.
	MaxTaskBytes int
	// Version is the software version the status message reports.
	Version string
	// Agents are the agents the status message lists; default [Agent].
	Agents []string

	// ConnectTimeout bounds one connection attempt (dial, TLS, CONNACK),
	// default 10s.
	ConnectTimeout time.Duration
	// KeepAlive is the MQTT keep-alive, default 30s.
	KeepAlive time.Duration
	// MaxReconnectInterval caps the reconnection backoff, default 30s.
	MaxReconnectInterval time.Duration
	// PublishTimeout is how long a result's publication may wait for its
	// PUBACK on a live connection before it is published again,
	// default 30s.
	PublishTimeout time.Duration
	// MaxPendingSubmits bounds the tasks being made durable at once;
	// beyond it the client stops reading from the broker until some
	// finish. Default 4096.
	MaxPendingSubmits int

	// FleetGate, when set, is asked before a task from the fleet topic is
	// submitted: one device in the fleet runs each task id (its claims,
	// transport/fleet). A task claimed by another device is dead-lettered
	// with the owner (code claimed_elsewhere) and acknowledged; an error
	// leaves it unacknowledged for the broker to deliver again.
	FleetGate FleetGate

	// StateDir is where the client remembers, across restarts, the
	// retained messages it dead-lettered (RejectedFile); the agent's
	// directory. Empty: it remembers them for the process's life only.
	StateDir string

	Log zerolog.Logger
	Now func() time.Time
}

// FleetGate decides which device runs a fleet task.
type FleetGate interface {
	Claim(ctx context.Context, taskID string) (owner string, mine bool, err error)
}

// Topics are the topics of one agent.
type Topics struct {
	Tasks       string // {prefix}/{device}/agents/{agent}/tasks
	Fleet       string // {prefix}/fleet/tasks (what fleet messages arrive on)
	FleetShared string // $share/{group}/{prefix}/fleet/tasks (what is subscribed)
	Results     string
	Progress    string
	Status      string // {prefix}/{device}/status
	DeadLetter  string // {prefix}/{device}/deadletter
}

// TopicsFor returns the topics of agent on device under prefix.
func TopicsFor(prefix, device, agentID, group string) Topics {
	a := prefix + "/" + device + "/agents/" + agentID + "/"
	return Topics{
		Tasks:       a + "tasks",
		Fleet:       FleetTopic(prefix),
		FleetShared: "$share/" + group + "/" + FleetTopic(prefix),
		Results:     a + "results",
		Progress:    a + "progress",
		Status:      StatusTopic(prefix, device),
		DeadLetter:  prefix + "/" + device + "/deadletter",
	}
}

// StatusTopic is the device's retained status topic.
func StatusTopic(prefix, device string) string { return prefix + "/" + device + "/status" }

// FleetTopic is the topic fleet tasks are published to.
func FleetTopic(prefix string) string { return prefix + "/fleet/tasks" }

// ClientID is the stable client id of an agent's session.
func ClientID(device, agentID string) string { return "openstarry-" + device + "-" + agentID }

// ValidatePrefix checks a topic prefix: one or more non-empty levels
// without wildcards, not starting with '$'.
func ValidatePrefix(p string) error {
	switch {
	case p == "":
		return errors.New("topic prefix is empty")
	case strings.HasPrefix(p, "$"):
		return fmt.Errorf("topic prefix %q starts with '$' (reserved for broker topics)", p)
	case strings.ContainsAny(p, "+#\x00"):
		return fmt.Errorf("topic prefix %q contains a wildcard or NUL", p)
	}
	for _, lvl := range strings.Split(p, "/") {
		if lvl == "" {
			return fmt.Errorf("topic prefix %q has an empty level", p)
		}
	}
	return nil
}

// ParseBrokerURL checks a broker URL and adds the default port: 1883 for
// tcp:// and mqtt://, 8883 for ssl://, mqtts:// and tls://. It reports
// whether the URL asks for TLS.
func ParseBrokerURL(raw string) (u *url.URL, secure bool, err error) {
	u, err = url.Parse(raw)
	if err != nil {
		return nil, false, fmt.Errorf("broker url %q: %w", raw, err)
	}
	port := "1883"
	switch u.Scheme {
	case "tcp", "mqtt":
	case "ssl", "mqtts", "tls":
		port, secure = "8883", true
	default:
		return nil, false, fmt.Errorf("broker url %q: scheme %q is not one of tcp://, mqtt://, ssl://, mqtts://, tls://", raw, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, false, fmt.Errorf("broker url %q names no host", raw)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, false, fmt.Errorf("broker url %q: a broker URL has no path", raw)
	}
	u.Path = ""
	return u, secure, nil
}

func (c *Config) setDefaults() {
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if c.FleetGroup == "" {
		c.FleetGroup = DefaultFleetGroup
	}
	if c.MaxTaskBytes <= 0 {
		c.MaxTaskBytes = DefaultMaxTaskBytes
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.MaxReconnectInterval <= 0 {
		c.MaxReconnectInterval = DefaultMaxReconnectInterval
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxPendingSubmits <= 0 {
		c.MaxPendingSubmits = DefaultMaxPendingSubmits
	}
	if len(c.Agents) == 0 && c.Agent != "" {
		c.Agents = []string{c.Agent}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// validate checks c and builds the TLS configuration.
func (c *Config) validate() (*url.URL, *tls.Config, error) {
	if err := agent.ValidateID(c.Device); err != nil {
		return nil, nil, fmt.Errorf("device id: %w", err)
	}
	if err := agent.ValidateID(c.Agent); err != nil {
		return nil, nil, fmt.Errorf("agent id: %w", err)
	}
	if err := ValidatePrefix(c.TopicPrefix); err != nil {
		return nil, nil, err
	}
	if strings.ContainsAny(c.FleetGroup, "/+#") {
		return nil, nil, fmt.Errorf("fleet group %q contains '/', '+' or '#'", c.FleetGroup)
	}
	u, secure, err := ParseBrokerURL(c.Broker)
	if err != nil {
		return nil, nil, err
	}
	tc, err := TLSConfig(u, secure, c.CAFile, c.CertFile, c.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	if c.TLS != nil {
		if !secure {
			return nil, nil, fmt.Errorf("broker url %s is not ssl:// or mqtts://, but a TLS configuration was given", u)
		}
		tc = c.TLS
	}
	return u, tc, nil
}

// TLSConfig builds the client TLS configuration of a broker URL: nil for a
// plain one (and then the files must be empty), else TLS 1.2 or later with
// the CA file's roots (default the system's) and the client certificate.
func TLSConfig(u *url.URL, secure bool, caFile, certFile, keyFile string) (*tls.Config, error) {
	if !secure {
		if caFile != "" || certFile != "" || keyFile != "" {
			return nil, fmt.Errorf("broker url %s is not ssl:// or mqtts://, but a CA, certificate or key file was given", u)
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt CA file %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both the certificate and the key file")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
