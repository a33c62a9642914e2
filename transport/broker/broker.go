package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// DefaultListen is the embedded broker's default address: loopback only.
const DefaultListen = plugin.DefaultBrokerListen

// DBFile is the name of the broker's store in the data directory.
const DBFile = "broker.db"

// ErrAddrInUse is wrapped by Start's error when the listen address is taken
// (by another broker, most likely).
var ErrAddrInUse = errors.New("address already in use")

// Config configures the embedded broker.
type Config struct {
	// Listen is the TCP address, default DefaultListen. Port 0 picks a
	// free port; Addr reports it.
	Listen string
	// DataDir holds DBFile. Empty: nothing is persisted (tests).
	DataDir string
	// Users may connect with a password from anywhere; anonymous clients
	// only from loopback.
	Users []User
	// TopicPrefix is the first level of every OpenStarry topic, default
	// "openstarry"; device users' ACLs are built from it.
	TopicPrefix string
	// Log receives mochi's log records (bridged from slog).
	Log zerolog.Logger
	// AckHold is how long a QoS 1 PUBACK waits for the persistent
	// subscribers to acknowledge the message before the broker stores it
	// (with DataDir set), default DefaultAckHold.
	AckHold time.Duration

	// The bounds (limits.go); zero is the default of each.
	//
	// MaxPacketBytes is the largest packet accepted, default
	// DefaultMaxPacketBytes (at most MaxPacketLimit); a larger one is
	// refused once its length is read, and its client disconnected.
	MaxPacketBytes int
	// ConnectTimeout is how long a connection may take to send its
	// CONNECT, default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxConnections bounds the open connections, default
	// DefaultMaxConnections; one more is closed at once.
	MaxConnections int
	// MaxRetainedBytes bounds the retained messages (topics and
	// payloads), default DefaultMaxRetainedBytes.
	MaxRetainedBytes int64

	// resultAckDelay is how long the PUBACK of an agent's result may wait
	// for the next packet to the agent (gate.go), default ResultAckDelay;
	// tests lengthen it.
	resultAckDelay time.Duration
}

// withDefaults fills in the zero fields.
func (cfg Config) withDefaults() Config {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "openstarry"
	}
	if cfg.AckHold <= 0 {
		cfg.AckHold = DefaultAckHold
	}
	if cfg.MaxPacketBytes <= 0 {
		cfg.MaxPacketBytes = DefaultMaxPacketBytes
	}
	cfg.MaxPacketBytes = min(cfg.MaxPacketBytes, MaxPacketLimit)
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxRetainedBytes <= 0 {
		cfg.MaxRetainedBytes = DefaultMaxRetainedBytes
	}
	if cfg.resultAckDelay <= 0 {
		cfg.resultAckDelay = ResultAckDelay
	}
	return cfg
}

// Broker is a running embedded broker.
type Broker struct {
	srv      *mqtt.Server
	ln       net.Listener
	bound    *boundListener
	log      zerolog.Logger
	takeover *takeoverHook
	once     sync.Once
}

// Start binds the listener, loads the persisted sessions and serves. The
// broker runs until Close.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	cfg = cfg.withDefaults()
	log := cfg.Log.With().Str("component", "broker").Logger()
	auth, err := newAuthHook(cfg.Users, cfg.TopicPrefix)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		if isAddrInUse(err) {
			return nil, fmt.Errorf("embedded broker: listen %s: %w", cfg.Listen, ErrAddrInUse)
		}
		return nil, fmt.Errorf("embedded broker: listen %s: %w", cfg.Listen, err)
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumMessageExpiryInterval = 0              // queued tasks never expire
	caps.MaximumSessionExpiryInterval = math.MaxUint32 // sessions of offline agents never expire
	caps.MaximumInflight = math.MaxUint16              // per client, beyond it mochi drops
	caps.ReceiveMaximum = math.MaxUint16               // a fast v3 publisher is not disconnected
	caps.MaximumClientWritesPending = 64 * 1024
	caps.MaximumPacketSize = uint32(cfg.MaxPacketBytes)
	caps.MaximumConnectPacketSize = uint32(min(cfg.MaxPacketBytes, MaxConnectBytes))
	// An acknowledgement carries no property of the packet it answers:
	// mochi copies the PUBLISH's (user properties, content type) into its
	// PUBACK by default, which no other broker does (Mosquitto sends none).
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	bridge := NewSlogHandler(log)
	bridge.Demote = demote
	srv := mqtt.New(&mqtt.Options{
		Capabilities:           caps,
		Logger:                 slog.New(bridge),
		SysTopicResendInterval: 60,
	})
	b := &Broker{srv: srv, ln: ln, log: log}
	if err := srv.AddHook(auth, nil); err != nil {
		ln.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	if err := srv.AddHook(newLimitsHook(srv, log, cfg.MaxRetainedBytes, cfg.MaxPacketBytes), nil); err != nil {
		ln.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	var store *boltHook
	if cfg.DataDir != "" {
		path := filepath.Join(cfg.DataDir, DBFile)
		store = newBoltHook(cfg.AckHold, cfg.TopicPrefix, cfg.resultAckDelay)
		err := srv.AddHook(store, &bolt.Options{
			Path:    path,
			Options: &bbolt.Options{Timeout: time.Second},
		})
		if err != nil {
			ln.Close()
			if errors.Is(err, bbolt.ErrTimeout) {
				return nil, fmt.Errorf("embedded broker: %s is locked by another process (another broker uses this data directory)", path)
			}
			return nil, fmt.Errorf("embedded broker: open %s: %w", path, err)
		}
	}
	b.takeover = newTakeoverHook(srv, store)
	if err := srv.AddHook(b.takeover, nil); err != nil {
		b.closeServer()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	b.bound = &boundListener{Listener: ln, maxConns: int64(cfg.MaxConnections), timeout: cfg.ConnectTimeout, log: log}
	if err := srv.AddListener(&netListener{Net: listeners.NewNet("tcp", gateListener{b.bound}), srv: srv}); err != nil {
		b.closeServer()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	if err := srv.Serve(); err != nil {
		b.closeServer()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	log.Info().Str("addr", ln.Addr().String()).Bool("persistent", cfg.DataDir != "").Int("users", len(cfg.Users)).
		Msgf("embedded broker listening on %s", ln.Addr())
	return b, nil
}

// Addr is the bound listen address.
func (b *Broker) Addr() net.Addr { return b.ln.Addr() }

// URL is the address as a client URL, tcp://HOST:PORT; an unspecified host
// (0.0.0.0, ::) becomes loopback.
func (b *Broker) URL() string {
	host, port, _ := net.SplitHostPort(b.ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "tcp://" + net.JoinHostPort(host, port)
}

// Close disconnects every client, stops listening and closes the store. It
// is safe to call more than once.
func (b *Broker) Close() error {
	b.once.Do(b.closeServer)
	return nil
}

func (b *Broker) closeServer() {
	// Stop accepting, let mochi take the connections accepted, close
	// those without a CONNECT, then disconnect the clients; mochi's Close
	// waits for their goroutines before it closes the store under them.
	_ = b.ln.Close()
	if b.bound != nil {
		b.bound.drain(5 * time.Second)
	}
	for _, cl := range b.srv.Clients.GetAll() {
		if !cl.Closed() {
			_ = b.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
	_ = b.srv.Close()
}

// netListener is mochi's TCP listener with its own way of closing the
// clients at shutdown. mochi v2.7.9's Clients.GetByListener, which
// Server.Close uses, takes the clients' read lock twice; a client that
// disconnects in between (Clients.Delete waiting for the write lock)
// deadlocks the broker for good (mochi-mqtt/server#488, fix not released).
// Here the clients are listed once under a single read lock (Clients.GetAll).
type netListener struct {
	*listeners.Net
	srv *mqtt.Server
}

// Close closes the listener and disconnects its clients.
func (l *netListener) Close(listeners.CloseFn) {
	l.Net.Close(func(id string) {
		for _, cl := range l.srv.Clients.GetAll() {
			if cl.Net.Listener == id && !cl.Closed() {
				_ = l.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
			}
		}
	})
}

// demote lowers to debug mochi's start and stop chatter (hooks added,
// listener attached), a client connection that ended (EOF, closed at
// shutdown), the error its bbolt hook logs for a store that holds no
// server info yet (a fresh broker.db), which is no error, and its error
// line (with the whole packet) for a retained message refused, which
// limitsHook logs.
func demote(r slog.Record) bool {
	if r.Level < slog.LevelWarn {
		return true
	}
	benign := false
	r.Attrs(func(a slog.Attr) bool {
		e, ok := a.Value.Any().(error)
		switch {
		case !ok:
		case r.Message == "failed to get data" && errors.Is(e, bolt.ErrKeyNotFound):
			benign = true
		case r.Message == "publish packet error" && errors.Is(e, packets.ErrQuotaExceeded):
			benign = true // a retained message refused, logged by limitsHook
		case r.Message == "" && (errors.Is(e, io.EOF) || errors.Is(e, net.ErrClosed)):
			benign = true
		}
		return !benign
	})
	return benign
}

func isAddrInUse(err error) bool {
	if errors.Is(err, syscall.EADDRINUSE) {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == 10048 { // WSAEADDRINUSE
		return true
	}
	return strings.Contains(err.Error(), "address already in use")
}
