package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// Config is the daemon's whole configuration. The zero Config is not
// usable: start from Default or Load.
type Config struct {
	Data      string // data directory
	Store     string // snapshot store URL; "" = bbolt:// under Data
	HTTP      HTTP
	Design    Design
	MQTT      MQTT
	Supervise Supervise
	Master    Master
	Sessions  Sessions
	Update    Update
	Log       Log

	// ScrubInterval is how often, at most, each agent reads its store's
	// files back from the disk when idle, and the daemon checks
	// sessions.db; 0: never.
	ScrubInterval time.Duration
}

// Update bounds the trial of a new binary (core/update).
type Update struct {
	// TrialTimeout is how long a new version has, at each start, to bring
	// its master online and pass /healthz before it is rolled back.
	TrialTimeout time.Duration
	// MaxBoots is how many starts a new version gets before it is rolled
	// back as crash-looping.
	MaxBoots int
}

// Sessions tunes session continuity (projects, sessions, approvals).
type Sessions struct {
	// CheckpointInterval is how often an active session's
	// state_checkpoint.json is written besides the event moments.
	CheckpointInterval time.Duration
	// AutoResume resumes interrupted sessions at boot without an operator.
	AutoResume bool
}

// MinTokenLen is the shortest http.token (and run --token) accepted: a
// bearer token guessed by brute force, even at the lockout's rate, must be
// out of reach.
const MinTokenLen = 16

// HTTP is the daemon's own listener (/healthz, /metrics, the agents).
type HTTP struct {
	Listen string // "" disables it
	Token  string // bearer token required from off loopback
	// Hosts are more names the HTTP listener answers to in the Host
	// header, besides loopback names, IP addresses and the machine's name.
	Hosts []string
	// Handoff lets the daemon hand a client's connection to the agent it
	// asks for, which then serves it (core/connpass; Linux only).
	Handoff bool
}

// Design says where blueprints come from.
type Design struct {
	URL         string // remote design layer; "" = local templates only
	Timeout     time.Duration
	Retries     int
	TrustedKeys []string // ed25519 public keys (base64 or .pub files)
	// AllowUnsignedCommands lets unsigned templates from the design layer
	// start mcp_servers commands (refused by default).
	AllowUnsignedCommands bool
	Templates             string // local template directory; "" = DATA/templates
}

// MQTT is handed to the agents (as their flags) and to the embedded broker.
type MQTT struct {
	Disabled     bool
	Broker       string // hub URL; "" = the embedded broker
	BrokerListen string // embedded broker address
	BrokerUsers  string // embedded broker users file
	// The embedded broker's bounds (transport/broker, limits.go).
	BrokerMaxPacketBytes   int
	BrokerConnectTimeout   time.Duration
	BrokerMaxConnections   int
	BrokerMaxRetainedBytes int
	Device                 string // "" = the host name
	TopicPrefix            string
	FleetGroup             string
	NoFleet                bool
	// FleetWorkers lets agents of worker templates take fleet tasks too;
	// by default only masters do.
	FleetWorkers bool
	Username     string
	Password     string
	CA           string
	Cert         string
	Key          string
	// TelemetryInterval is how often the daemon publishes the device's
	// retained telemetry (also on every agent state change).
	TelemetryInterval time.Duration
}

// Supervise tunes the restart policy of the agent processes.
type Supervise struct {
	BackoffInitial    time.Duration // wait before the first restart; doubles per restart in the window
	BackoffMax        time.Duration // cap of the wait
	CrashloopRestarts int           // restarts allowed within CrashloopWindow before crashloop
	CrashloopWindow   time.Duration
	StopTimeout       time.Duration // SIGTERM → SIGKILL
	ReadyTimeout      time.Duration // spawn → listening
}

// Master names the first agent.
type Master struct {
	Agent    string // agent id
	Template string // template name
}

// Log sets the daemon's (and its agents') logging.
type Log struct {
	Level  string
	Format string // "", json, console
}

// Key is one setting.
type Key struct {
	Name    string // dotted, as in the file: "http.listen"
	Env     string // OPENSTARRY_...
	Default string // as text, parsed like an environment value
	Doc     string
	Secret  bool // never printed
	// Flag is the key's command-line flag in `openstarry run` and
	// `openstarry core` (without the dashes); "" for a key of the daemon
	// alone.
	Flag string
	// Agent marks a key the daemon hands to its agent processes, as Flag
	// or, when Secret, in Env (AgentArgs).
	Agent bool
	field func(c *Config) any
}

// Keys lists every setting, in the order of the shipped file. The names of
// the environment variables are those `openstarry run` already reads where
// the setting is the same one (OPENSTARRY_BROKER, OPENSTARRY_DEVICE, ...).
var Keys = []Key{
	{Name: "data", Env: "OPENSTARRY_DATA", Default: "./data", Doc: "data directory: agent stores, the template cache, run/ (control socket, frozen blueprints)", Flag: "data", field: func(c *Config) any { return &c.Data }},
	{Name: "store", Env: "OPENSTARRY_STORE", Doc: "snapshot store URL (bbolt://, sqlite://, file://, redis://); empty: bbolt:// under the data directory", Flag: "store", field: func(c *Config) any { return &c.Store }},
	{Name: "scrub_interval", Env: "OPENSTARRY_SCRUB_INTERVAL", Default: "1h", Doc: "how often, at most, each agent reads its store's files back from the disk to find damage (after 30 seconds without a save), and the daemon checks sessions.db; 0 disables it", Flag: "scrub-interval", Agent: true, field: func(c *Config) any { return &c.ScrubInterval }},

	{Name: "http.listen", Env: "OPENSTARRY_HTTP_LISTEN", Default: "127.0.0.1:7777", Doc: "the daemon's HTTP address (/healthz, /metrics, /status, /agents/{id}/...); empty disables it", field: func(c *Config) any { return &c.HTTP.Listen }},
	{Name: "http.token", Env: "OPENSTARRY_HTTP_TOKEN", Doc: "bearer token required for HTTP requests from off loopback, at least 16 characters; required when http.listen is not loopback", Secret: true, field: func(c *Config) any { return &c.HTTP.Token }},
	{Name: "http.hosts", Env: "OPENSTARRY_HTTP_HOSTS", Doc: "more host names the HTTP listener answers to (Host header), besides IP addresses, localhost and this machine's name; \"*.example.com\" for the names under example.com; env: comma-separated. Any other Host is refused 403 bad_host (DNS rebinding)", field: func(c *Config) any { return &c.HTTP.Hosts }},
	{Name: "http.handoff", Env: "OPENSTARRY_HTTP_HANDOFF", Default: "true", Doc: "hand a client's connection for /agents/{id}/... to that agent's process, which serves its later requests itself under the listener's rules (Linux; plain HTTP); false: the daemon forwards every request", field: func(c *Config) any { return &c.HTTP.Handoff }},

	{Name: "design.url", Env: "OPENSTARRY_DESIGN_URL", Doc: "design layer root URL; empty: local templates (design.templates, then the built-in ones)", Flag: "design-url", field: func(c *Config) any { return &c.Design.URL }},
	{Name: "design.timeout", Env: "OPENSTARRY_DESIGN_TIMEOUT", Default: "5s", Doc: "timeout of one design layer request", Flag: "design-timeout", field: func(c *Config) any { return &c.Design.Timeout }},
	{Name: "design.retries", Env: "OPENSTARRY_DESIGN_RETRIES", Default: "3", Doc: "retries of a failed design layer request before the cached copy is used (0: none)", Flag: "design-retries", field: func(c *Config) any { return &c.Design.Retries }},
	{Name: "design.trusted_keys", Env: "OPENSTARRY_DESIGN_TRUSTED_KEYS", Doc: "ed25519 public keys (base64 or .pub file paths) one of which must have signed templates from the design layer; env: comma-separated", Flag: "trusted-key", field: func(c *Config) any { return &c.Design.TrustedKeys }},
	{Name: "design.allow_unsigned_commands", Env: "OPENSTARRY_DESIGN_ALLOW_UNSIGNED_COMMANDS", Default: "false", Doc: "let a template from design.url name mcp_servers commands without design.trusted_keys (each is logged as a warning); by default such a template is refused", field: func(c *Config) any { return &c.Design.AllowUnsignedCommands }},
	{Name: "design.templates", Env: "OPENSTARRY_TEMPLATES", Doc: "local template directory; empty: DATA/templates", Flag: "templates", field: func(c *Config) any { return &c.Design.Templates }},

	{Name: "mqtt.disabled", Env: "OPENSTARRY_NO_MQTT", Default: "false", Doc: "no MQTT at all: no embedded broker, agents take tasks over HTTP only", Flag: "no-mqtt", Agent: true, field: func(c *Config) any { return &c.MQTT.Disabled }},
	{Name: "mqtt.broker", Env: "OPENSTARRY_BROKER", Doc: "hub broker URL (tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]); empty: the embedded broker, started by the daemon (or by run)", Flag: "broker", Agent: true, field: func(c *Config) any { return &c.MQTT.Broker }},
	{Name: "mqtt.broker_listen", Env: "OPENSTARRY_BROKER_LISTEN", Default: "127.0.0.1:1883", Doc: "address of the embedded broker (when mqtt.broker is empty); port 0 picks a free one; when the default address is taken, the broker already listening there is used", Flag: "broker-listen", field: func(c *Config) any { return &c.MQTT.BrokerListen }},
	{Name: "mqtt.broker_users", Env: "OPENSTARRY_BROKER_USERS", Doc: "JSON users file of the embedded broker (hashed passwords, device ACLs); without it only loopback clients connect", Flag: "broker-users", field: func(c *Config) any { return &c.MQTT.BrokerUsers }},
	{Name: "mqtt.broker_max_packet_bytes", Env: "OPENSTARRY_BROKER_MAX_PACKET_BYTES", Default: "1048576", Doc: "largest MQTT packet the embedded broker accepts (at most 268435460); a larger one is refused as its length is read and its client disconnected; keep it above the templates' limits.max_task_bytes and the largest result", Flag: "broker-max-packet-bytes", field: func(c *Config) any { return &c.MQTT.BrokerMaxPacketBytes }},
	{Name: "mqtt.broker_connect_timeout", Env: "OPENSTARRY_BROKER_CONNECT_TIMEOUT", Default: "10s", Doc: "how long a connection to the embedded broker may take to send its CONNECT before it is closed", Flag: "broker-connect-timeout", field: func(c *Config) any { return &c.MQTT.BrokerConnectTimeout }},
	{Name: "mqtt.broker_max_connections", Env: "OPENSTARRY_BROKER_MAX_CONNECTIONS", Default: "256", Doc: "open connections the embedded broker keeps (with or without their CONNECT); one more is closed at once", Flag: "broker-max-connections", field: func(c *Config) any { return &c.MQTT.BrokerMaxConnections }},
	{Name: "mqtt.broker_max_retained_bytes", Env: "OPENSTARRY_BROKER_MAX_RETAINED_BYTES", Default: "67108864", Doc: "bytes (topics and payloads) of the retained messages the embedded broker keeps; a retained message beyond it is refused", Flag: "broker-max-retained-bytes", field: func(c *Config) any { return &c.MQTT.BrokerMaxRetainedBytes }},
	{Name: "mqtt.device", Env: "OPENSTARRY_DEVICE", Doc: "device id in the topics; empty: the host name", Flag: "device", Agent: true, field: func(c *Config) any { return &c.MQTT.Device }},
	{Name: "mqtt.topic_prefix", Env: "OPENSTARRY_MQTT_TOPIC_PREFIX", Default: "openstarry", Doc: "first level of every topic", Flag: "topic-prefix", Agent: true, field: func(c *Config) any { return &c.MQTT.TopicPrefix }},
	{Name: "mqtt.fleet_group", Env: "OPENSTARRY_MQTT_FLEET_GROUP", Default: "openstarry", Doc: "shared-subscription group of the fleet task topic (the master takes fleet tasks, workers never do)", Flag: "fleet-group", Agent: true, field: func(c *Config) any { return &c.MQTT.FleetGroup }},
	{Name: "mqtt.no_fleet", Env: "OPENSTARRY_MQTT_NO_FLEET", Default: "false", Doc: "take no tasks from the fleet topic (under the daemon workers never do; this stops the master too)", Flag: "no-fleet", Agent: true, field: func(c *Config) any { return &c.MQTT.NoFleet }},
	{Name: "mqtt.fleet_workers", Env: "OPENSTARRY_MQTT_FLEET_WORKERS", Default: "false", Doc: "agents of worker templates take fleet tasks too (by default only masters join the fleet group)", Flag: "fleet-workers", Agent: true, field: func(c *Config) any { return &c.MQTT.FleetWorkers }},
	{Name: "mqtt.username", Env: "OPENSTARRY_MQTT_USERNAME", Doc: "MQTT user name", Flag: "mqtt-username", Agent: true, field: func(c *Config) any { return &c.MQTT.Username }},
	{Name: "mqtt.password", Env: "OPENSTARRY_MQTT_PASSWORD", Doc: "MQTT password; handed to the agents through their environment, never on a command line", Secret: true, Flag: "mqtt-password", Agent: true, field: func(c *Config) any { return &c.MQTT.Password }},
	{Name: "mqtt.ca", Env: "OPENSTARRY_MQTT_CA", Doc: "PEM file of the CA that signed the hub's certificate; empty: the system roots", Flag: "mqtt-ca", Agent: true, field: func(c *Config) any { return &c.MQTT.CA }},
	{Name: "mqtt.cert", Env: "OPENSTARRY_MQTT_CERT", Doc: "PEM client certificate for TLS", Flag: "mqtt-cert", Agent: true, field: func(c *Config) any { return &c.MQTT.Cert }},
	{Name: "mqtt.telemetry_interval", Env: "OPENSTARRY_MQTT_TELEMETRY_INTERVAL", Default: "1m", Doc: "how often the device's retained telemetry is published ({prefix}/{device}/telemetry), besides every agent state change", field: func(c *Config) any { return &c.MQTT.TelemetryInterval }},
	{Name: "mqtt.key", Env: "OPENSTARRY_MQTT_KEY", Doc: "PEM key of mqtt.cert", Flag: "mqtt-key", Agent: true, field: func(c *Config) any { return &c.MQTT.Key }},

	{Name: "supervise.backoff_initial", Env: "OPENSTARRY_SUPERVISE_BACKOFF_INITIAL", Default: "200ms", Doc: "wait before restarting a crashed agent; doubles with each restart in the crash-loop window, ±20% jitter", field: func(c *Config) any { return &c.Supervise.BackoffInitial }},
	{Name: "supervise.backoff_max", Env: "OPENSTARRY_SUPERVISE_BACKOFF_MAX", Default: "30s", Doc: "longest wait before a restart", field: func(c *Config) any { return &c.Supervise.BackoffMax }},
	{Name: "supervise.crashloop_restarts", Env: "OPENSTARRY_SUPERVISE_CRASHLOOP_RESTARTS", Default: "5", Doc: "restarts allowed within supervise.crashloop_window; one more crash marks the agent crashloop and stops retrying until `openstarry agent restart ID`", field: func(c *Config) any { return &c.Supervise.CrashloopRestarts }},
	{Name: "supervise.crashloop_window", Env: "OPENSTARRY_SUPERVISE_CRASHLOOP_WINDOW", Default: "2m", Doc: "window of supervise.crashloop_restarts", field: func(c *Config) any { return &c.Supervise.CrashloopWindow }},
	{Name: "supervise.stop_timeout", Env: "OPENSTARRY_SUPERVISE_STOP_TIMEOUT", Default: "10s", Doc: "how long an agent may take to stop after SIGTERM before it is killed", field: func(c *Config) any { return &c.Supervise.StopTimeout }},
	{Name: "supervise.ready_timeout", Env: "OPENSTARRY_SUPERVISE_READY_TIMEOUT", Default: "30s", Doc: "how long a spawned agent may take to hydrate and listen before it counts as crashed", field: func(c *Config) any { return &c.Supervise.ReadyTimeout }},

	{Name: "master.agent", Env: "OPENSTARRY_MASTER_AGENT", Default: "master", Doc: "agent id of the master agent", field: func(c *Config) any { return &c.Master.Agent }},
	{Name: "master.template", Env: "OPENSTARRY_MASTER_TEMPLATE", Default: "master", Doc: "template (blueprint) name of the master agent", field: func(c *Config) any { return &c.Master.Template }},

	{Name: "sessions.checkpoint_interval", Env: "OPENSTARRY_SESSIONS_CHECKPOINT_INTERVAL", Default: "5m", Doc: "how often an active session's state_checkpoint.json is written, besides task completion, approvals, errors and the session's end", field: func(c *Config) any { return &c.Sessions.CheckpointInterval }},
	{Name: "sessions.auto_resume", Env: "OPENSTARRY_SESSIONS_AUTO_RESUME", Default: "false", Doc: "resume interrupted sessions at boot by themselves; off: an operator resumes them (API, `openstarry session resume`) after reading why they stopped", field: func(c *Config) any { return &c.Sessions.AutoResume }},

	{Name: "update.trial_timeout", Env: "OPENSTARRY_UPDATE_TRIAL_TIMEOUT", Default: "2m", Doc: "how long a new binary has, at each start, to bring its master online and pass /healthz before the previous one is put back", field: func(c *Config) any { return &c.Update.TrialTimeout }},
	{Name: "update.max_boots", Env: "OPENSTARRY_UPDATE_MAX_BOOTS", Default: "3", Doc: "starts a new binary gets to become healthy before it is rolled back as crash-looping", field: func(c *Config) any { return &c.Update.MaxBoots }},

	{Name: "log.level", Env: "OPENSTARRY_LOG_LEVEL", Default: "info", Doc: "trace, debug, info, warn or error (the agents get the same)", Flag: "log-level", field: func(c *Config) any { return &c.Log.Level }},
	{Name: "log.format", Env: "OPENSTARRY_LOG_FORMAT", Doc: "json or console; empty: console on a terminal, JSON otherwise (journal)", Flag: "log-format", field: func(c *Config) any { return &c.Log.Format }},
}

// ErrUnknownKey is wrapped by the error of a key the configuration does
// not have.
var ErrUnknownKey = errors.New("unknown key")

// Lookup returns the key called name.
func Lookup(name string) (Key, bool) {
	for _, k := range Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Default returns the configuration with every default.
func Default() *Config {
	c := &Config{}
	for _, k := range Keys {
		if err := setText(k.field(c), k.Default); err != nil {
			panic(fmt.Sprintf("config: default of %s: %v", k.Name, err)) // a bad table row
		}
	}
	return c
}

// Set sets one key from its text form (what a flag or the environment
// holds). Lists are comma-separated.
func (c *Config) Set(name, value string) error {
	k, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownKey, name)
	}
	if err := setText(k.field(c), value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Get returns a key's value as text (lists comma-separated).
func (c *Config) Get(name string) (string, bool) {
	k, ok := Lookup(name)
	if !ok {
		return "", false
	}
	switch p := k.field(c).(type) {
	case *string:
		return *p, true
	case *int:
		return strconv.Itoa(*p), true
	case *bool:
		return strconv.FormatBool(*p), true
	case *time.Duration:
		return p.String(), true
	case *[]string:
		return strings.Join(*p, ","), true
	}
	return "", false
}

// Effective returns every key's value as text, secrets shown as "(set)" or
// "": what an operator may read remotely (the fleet's config.get).
func (c *Config) Effective() map[string]string {
	out := make(map[string]string, len(Keys))
	for _, k := range Keys {
		v, _ := c.Get(k.Name)
		if k.Secret && v != "" {
			v = "(set)"
		}
		out[k.Name] = v
	}
	return out
}

// Load returns the defaults, overlaid with the file at path (none when path
// is ""), overlaid with the environment read through getenv (os.LookupEnv
// when nil). The result is not validated yet: apply flags, then Validate.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	c := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := c.decodeFile(path, data); err != nil {
			return nil, err
		}
	}
	for _, k := range Keys {
		v, ok := getenv(k.Env)
		if !ok || v == "" {
			continue
		}
		if err := setText(k.field(c), v); err != nil {
			return nil, fmt.Errorf("config: environment %s (%s): %w", k.Env, k.Name, err)
		}
	}
	return c, nil
}

// Parse decodes a file's content over the defaults, without the
// environment (what tests and `templates`-like checks need).
func Parse(name string, data []byte) (*Config, error) {
	c := Default()
	if err := c.decodeFile(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeFile walks the YAML document and sets every key it holds. An
// unknown key, a section given a value or a value given a section is an
// error naming the key and its line.
func (c *Config) decodeFile(name string, data []byte) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("config %s: not UTF-8", name)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file: all defaults
		}
		return fmt.Errorf("config %s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: line %d: the document must be a mapping of keys", name, root.Line)
	}
	return c.walk(name, "", root)
}

func (c *Config) walk(file, prefix string, m *yaml.Node) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		name := kn.Value
		if prefix != "" {
			name = prefix + "." + kn.Value
		}
		if seen[kn.Value] {
			return fmt.Errorf("config %s: line %d: key %q already defined", file, kn.Line, name)
		}
		seen[kn.Value] = true
		if vn.Kind == yaml.AliasNode {
			vn = vn.Alias
		}
		k, isKey := Lookup(name)
		if !isKey {
			if section(name) && vn.Kind == yaml.MappingNode {
				if err := c.walk(file, name, vn); err != nil {
					return err
				}
				continue
			}
			if section(name) {
				return fmt.Errorf("config %s: line %d: %q is a section: give it keys (%s)", file, kn.Line, name, strings.Join(keysUnder(name), ", "))
			}
			return fmt.Errorf("config %s: line %d: %w %q%s", file, kn.Line, ErrUnknownKey, name, hint(name))
		}
		if err := setNode(k.field(c), vn); err != nil {
			return fmt.Errorf("config %s: line %d: %s: %w", file, vn.Line, name, err)
		}
	}
	return nil
}

// section reports whether name is the dotted prefix of some key.
func section(name string) bool { return len(keysUnder(name)) > 0 }

func keysUnder(prefix string) []string {
	var out []string
	for _, k := range Keys {
		if rest, ok := strings.CutPrefix(k.Name, prefix+"."); ok {
			out = append(out, rest)
		}
	}
	return out
}

// hint names the keys of the same section, or the sections at the top.
func hint(name string) string {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		if under := keysUnder(name[:i]); len(under) > 0 {
			return fmt.Sprintf(" (keys of %s: %s)", name[:i], strings.Join(under, ", "))
		}
	}
	seen := map[string]bool{}
	var tops []string
	for _, k := range Keys {
		top, _, _ := strings.Cut(k.Name, ".")
		if !seen[top] {
			seen[top] = true
			tops = append(tops, top)
		}
	}
	sort.Strings(tops)
	return fmt.Sprintf(" (top-level keys: %s)", strings.Join(tops, ", "))
}

// setNode sets a field from a YAML value. A null value leaves the field as
// it is.
func setNode(field any, n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if list, ok := field.(*[]string); ok {
		if n.Kind != yaml.SequenceNode {
			return errors.New("want a list ([a, b] or one \"- item\" per line)")
		}
		out := []string{}
		for _, it := range n.Content {
			if it.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: list items must be strings", it.Line)
			}
			out = append(out, it.Value)
		}
		*list = out
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a single value, not a list or a section")
	}
	return setText(field, n.Value)
}

// setText parses a text value into a field.
func setText(field any, v string) error {
	switch p := field.(type) {
	case *string:
		*p = v
	case *int:
		if v == "" {
			*p = 0
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*p = n
	case *bool:
		if v == "" {
			*p = false
			return nil
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*p = b
	case *time.Duration:
		if v == "" {
			*p = 0
			return nil
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 500ms, 10s, 2m)", v)
		}
		*p = d
	case *[]string:
		out := []string{}
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		*p = out
	default:
		return fmt.Errorf("unsupported field type %T", field)
	}
	return nil
}

// Validate checks values that would only fail later, deep in a boot.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.Data == "" {
		bad("data", "must not be empty")
	}
	if c.Store != "" {
		if u, err := url.Parse(c.Store); err != nil || u.Scheme == "" {
			bad("store", "%q is not a store URL (bbolt://, sqlite://, file://, redis://)", c.Store)
		}
	}
	if c.HTTP.Token != "" && len(c.HTTP.Token) < MinTokenLen {
		bad("http.token", "is too short: at least %d characters are required, it has %d (make one with: openssl rand -hex 16)", MinTokenLen, len(c.HTTP.Token))
	}
	if c.HTTP.Listen != "" {
		host, _, err := net.SplitHostPort(c.HTTP.Listen)
		if err != nil {
			bad("http.listen", "%q is not HOST:PORT", c.HTTP.Listen)
		} else if c.HTTP.Token == "" && !loopbackHost(host) {
			bad("http.listen", "%s is not a loopback address: set http.token (OPENSTARRY_HTTP_TOKEN) so the API is not open to the network", c.HTTP.Listen)
		}
	}
	if c.Design.URL != "" {
		if u, err := url.Parse(c.Design.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("design.url", "%q: want http:// or https://HOST[:PORT][/PATH]", c.Design.URL)
		}
	}
	if c.Design.Timeout <= 0 {
		bad("design.timeout", "must be positive")
	}
	if c.Design.Retries < 0 {
		bad("design.retries", "must not be negative")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"supervise.backoff_initial", c.Supervise.BackoffInitial},
		{"supervise.backoff_max", c.Supervise.BackoffMax},
		{"supervise.crashloop_window", c.Supervise.CrashloopWindow},
		{"supervise.stop_timeout", c.Supervise.StopTimeout},
		{"supervise.ready_timeout", c.Supervise.ReadyTimeout},
		{"sessions.checkpoint_interval", c.Sessions.CheckpointInterval},
		{"update.trial_timeout", c.Update.TrialTimeout},
	} {
		if d.v <= 0 {
			bad(d.key, "must be positive")
		}
	}
	if c.Supervise.BackoffMax < c.Supervise.BackoffInitial {
		bad("supervise.backoff_max", "%s is shorter than supervise.backoff_initial %s", c.Supervise.BackoffMax, c.Supervise.BackoffInitial)
	}
	if c.Update.MaxBoots < 1 {
		bad("update.max_boots", "must be at least 1")
	}
	if c.Supervise.CrashloopRestarts < 1 {
		bad("supervise.crashloop_restarts", "must be at least 1")
	}
	if agent.ValidateID(c.Master.Agent) != nil {
		bad("master.agent", "%q is not an agent id (letters, digits, - _ . :)", c.Master.Agent)
	}
	if !validTemplateName(c.Master.Template) {
		bad("master.template", "%q is not a template name ([a-z0-9][a-z0-9_-]*)", c.Master.Template)
	}
	switch strings.ToLower(c.Log.Level) {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q: want trace, debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "json", "console":
	default:
		bad("log.format", "%q: want json or console", c.Log.Format)
	}
	if err := c.MQTT.ValidateBroker(); err != nil {
		errs = append(errs, err)
	}
	if c.MQTT.Broker == "" && !c.MQTT.Disabled {
		if err := CheckBrokerListen(c.MQTT.BrokerListen, c.MQTT.Username); err != nil {
			bad("mqtt.broker_listen", "%v", err)
		}
	}
	if c.MQTT.Broker != "" && (c.MQTT.BrokerUsers != "") {
		bad("mqtt.broker_users", "configures the embedded broker; it cannot be used with mqtt.broker")
	}
	if c.MQTT.Broker == "" && !c.MQTT.Disabled && (c.MQTT.CA != "" || c.MQTT.Cert != "" || c.MQTT.Key != "") {
		bad("mqtt.ca", "mqtt.ca, mqtt.cert and mqtt.key need mqtt.broker ssl://… (the embedded broker listens without TLS)")
	}
	return errors.Join(errs...)
}

// ValidateBroker checks the embedded broker's bounds (the daemon's
// Validate and `openstarry run`, which starts the broker too, call it).
func (m MQTT) ValidateBroker() error {
	var errs []error
	for _, n := range []struct {
		key string
		bad bool
	}{
		{"mqtt.broker_max_packet_bytes", m.BrokerMaxPacketBytes <= 0},
		{"mqtt.broker_connect_timeout", m.BrokerConnectTimeout <= 0},
		{"mqtt.broker_max_connections", m.BrokerMaxConnections <= 0},
		{"mqtt.broker_max_retained_bytes", m.BrokerMaxRetainedBytes <= 0},
	} {
		if n.bad {
			errs = append(errs, fmt.Errorf("%s: must be positive", n.key))
		}
	}
	if m.BrokerMaxPacketBytes > 268435460 {
		errs = append(errs, fmt.Errorf("mqtt.broker_max_packet_bytes: %d is more than MQTT's largest packet, 268435460", m.BrokerMaxPacketBytes))
	}
	return errors.Join(errs...)
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckBrokerListen refuses an embedded broker address the device's own
// agents could not use: they connect to it at that address, and without a
// user name the broker admits only clients from loopback, so a specific
// non-loopback address (10.0.0.5:1883) needs username, a user of
// mqtt.broker_users. An unspecified address (0.0.0.0:1883, [::]:1883)
// is reached over 127.0.0.1.
func CheckBrokerListen(listen, username string) error {
	if listen == "" || username != "" {
		return nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT", listen)
	}
	if ip := net.ParseIP(host); loopbackHost(host) || (ip != nil && ip.IsUnspecified()) {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address, and this device's agents connect to the embedded broker there: "+
		"it admits clients without a user name only from loopback, so they would be refused. Listen on 0.0.0.0:%s "+
		"(the agents then connect over 127.0.0.1), or set mqtt.username and mqtt.password to a user of mqtt.broker_users", listen, port)
}

// validTemplateName mirrors design.ValidName.
func validTemplateName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '_' || c == '-'))
		if !ok {
			return false
		}
	}
	return true
}
