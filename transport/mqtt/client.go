package mqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/backoff"
	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// Errors of Start: the broker will not take this client, and retrying will
// not change that.
var (
	// ErrBadCredentials is returned when the broker refuses the user name
	// or password.
	ErrBadCredentials = errors.New("the broker refused the user name or password")
	// ErrNotAuthorized is returned when the broker refuses this client.
	ErrNotAuthorized = errors.New("the broker refused this client (not authorized)")
	// ErrTLS is returned when the TLS handshake fails: an unknown CA, a
	// certificate for another host, an expired or refused certificate.
	ErrTLS = errors.New("TLS handshake with the broker failed")
	// ErrRefused is returned for the other refusals of a CONNECT
	// (protocol version, client id).
	ErrRefused = errors.New("the broker refused the connection")
)

// Runtime is what the client needs of an agent runtime; *agent.Runtime
// implements it.
type Runtime interface {
	SubmitAsync(ctx context.Context, ev agent.Event, done func(agent.SubmitResult))
	Confirm(seq uint64)
}

// Stats count what the client did since New.
type Stats struct {
	Received     uint64 // task-topic messages received
	Accepted     uint64 // tasks made durable and acknowledged
	Duplicates   uint64 // tasks acknowledged as duplicates
	DeadLettered uint64 // messages rejected to the dead letter topic
	Published    uint64 // results confirmed (PUBACK) and handed to Confirm
}

// Client connects one agent to a broker. It implements agent.Outbox; give
// it to the runtime (Config.Outbox, Config.OnProgress = Client.Progress),
// then call Start with the runtime.
//
// It is no paho client: its connection is its own (link.go says why and
// how), an MQTT 3.1.1 session on the codec of transport/mqtt/wire.
type Client struct {
	cfg    Config
	log    zerolog.Logger
	url    *url.URL
	tc     *tls.Config
	topics Topics
	will   []byte // the last will's payload (nil: no will)

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the client's goroutines

	rt  Runtime       // set by Start before the first connection
	sem chan struct{} // bounds the tasks on their way to durability

	ackMu sync.Mutex // guards acks
	acks  []*taken   // the runtime's answers, for the publisher

	wmu sync.Mutex // one write on the connection at a time, whole

	mu      sync.Mutex       // guards what follows
	nc      net.Conn         // the connection; nil while there is none
	gen     uint64           // connections so far
	ops     map[uint16]opRef // packet id → what waits for its acknowledgement
	nextID  uint16           // the last packet id handed out
	flight  []*pending       // results handed over, not yet confirmed, in Seq order
	sent    int              // flight[:sent] were published (and wait for their PUBACK)
	resend  bool             // a new connection: flight[:sent] are published again (DUP)
	fresh   bool             // results were handed over since the publisher's last pass
	reports []progressMsg    // progress reports not yet seen by the publisher, in order
	lastSeq uint64           // highest Seq handed over
	anySeq  bool             // lastSeq is set
	started bool
	closed  bool

	lastIn  atomic.Int64 // when the last packet came from the broker (unix nanoseconds)
	blocked atomic.Bool  // the reader waits for room (MaxPendingSubmits): the broker is not silent

	wake       chan struct{} // nudges the publisher
	subscribed chan struct{} // closed after the first subscription attempt
	subOnce    sync.Once
	waitingN   atomic.Int64 // results handed over and not yet confirmed
	// checkEvery is how often the publisher looks at a result waiting for
	// its PUBACK, and publishes progress reports left waiting.
	checkEvery time.Duration

	rejected *rejectedSet // retained messages already dead-lettered
	instance Instance     // this process, in the status it owns

	received, accepted, duplicates, deadLettered, published atomic.Uint64
	queueFullLogged                                         atomic.Int64 // unix seconds of the last "queue full" log
}

// New checks cfg and prepares the client; it does no I/O.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	u, tc, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("mqtt: %w", err)
	}
	c := &Client{
		cfg:        cfg,
		url:        u,
		tc:         tc,
		topics:     TopicsFor(cfg.TopicPrefix, cfg.Device, cfg.Agent, cfg.FleetGroup),
		sem:        make(chan struct{}, cfg.MaxPendingSubmits),
		ops:        map[uint16]opRef{},
		wake:       make(chan struct{}, 1),
		checkEvery: time.Second,
		subscribed: make(chan struct{}),
		rejected:   newRejectedSet(cfg.StateDir),
		instance:   NewInstance(""),
	}
	c.log = cfg.Log.With().Str("component", "mqtt").Str("agent", cfg.Agent).Logger()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !cfg.NoDeviceStatus {
		c.will = c.status("offline", "connection lost")
	}
	return c, nil
}

// Topics returns the client's topics.
func (c *Client) Topics() Topics { return c.topics }

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{Received: c.received.Load(), Accepted: c.accepted.Load(), Duplicates: c.duplicates.Load(),
		DeadLettered: c.deadLettered.Load(), Published: c.published.Load()}
}

// Start binds the runtime and connects. It tries once, synchronously: a
// refused login or a failed TLS handshake is returned (ErrBadCredentials,
// ErrNotAuthorized, ErrTLS, ErrRefused) and the client is closed; any other
// failure (the broker is unreachable) is logged and retried in the
// background. Start may be called once.
func (c *Client) Start(ctx context.Context, rt Runtime) error {
	c.mu.Lock()
	if c.started || c.closed {
		c.mu.Unlock()
		return errors.New("mqtt: Start called twice or after Close")
	}
	c.started = true
	c.mu.Unlock()
	c.rt = rt
	c.wg.Add(1)
	go c.publishLoop()

	conn, r, code, err := c.dial(ctx)
	if err == nil {
		c.wg.Add(1)
		go c.run(conn, r)
		// Return subscribed, so that what is published from now on
		// reaches the agent even on the session's very first connection.
		select {
		case <-c.subscribed:
		case <-time.After(c.cfg.ConnectTimeout):
		case <-ctx.Done():
		}
		return nil
	}
	if fatal := classify(code, err); fatal != nil {
		c.stop()
		return connectError(c.url, fatal, err)
	}
	if ctx.Err() != nil {
		c.stop()
		return ctx.Err()
	}
	c.log.Warn().Err(err).Str("broker", c.url.Redacted()).
		Msg("mqtt: broker unreachable; retrying in the background (tasks wait at the broker, results wait here)")
	c.wg.Add(1)
	go c.run(nil, nil)
	return nil
}

// classify returns the sentinel of a failure that retrying will not heal,
// or nil.
func classify(rc byte, err error) error {
	switch rc { // CONNACK return codes, paho's and wire's alike
	case wire.RefusedCredentials:
		return ErrBadCredentials
	case wire.RefusedNotAuthed:
		return ErrNotAuthorized
	case wire.RefusedProtocol, wire.RefusedIdentifier:
		return ErrRefused
	}
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) {
		return ErrTLS
	}
	return nil
}

// connectError words a refused connection: the sentinel, and the cause
// when it says more (a TLS failure says which certificate check failed).
func connectError(u *url.URL, fatal, err error) error {
	if errors.Is(fatal, ErrTLS) {
		return fmt.Errorf("mqtt: %s: %w: %v", u.Redacted(), fatal, cause(err))
	}
	return fmt.Errorf("mqtt: %s: %w", u.Redacted(), fatal)
}

// cause strips paho's "network Error : " wrapping.
func cause(err error) error {
	for {
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			errs := e.Unwrap()
			if len(errs) == 0 {
				return err
			}
			err = errs[len(errs)-1]
		default:
			return err
		}
	}
}

// done reports whether tok has completed.
func done(tok paho.Token) bool {
	select {
	case <-tok.Done():
		return true
	default:
		return false
	}
}

func waitToken(ctx context.Context, tok paho.Token, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-t.C:
		return fmt.Errorf("no answer from the broker within %s", limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is the schedule of connection attempts: 1s doubling up to
// MaxReconnectInterval, with core/backoff's jitter.
func (c *Client) backoff() backoff.Policy {
	return backoff.Policy{Initial: time.Second, Max: c.cfg.MaxReconnectInterval}
}

func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func (c *Client) connected() (bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc != nil, c.gen
}

func (c *Client) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// StatusMessage is the retained payload of the device's status topic.
type StatusMessage struct {
	State   string   `json:"state"` // online, offline
	Device  string   `json:"device"`
	Version string   `json:"version,omitempty"`
	Agents  []string `json:"agents"`
	Reason  string   `json:"reason,omitempty"`
	Time    string   `json:"time,omitempty"` // RFC 3339, when it was published (not in a will)
	// Owner is who published it: OwnerDaemon or OwnerAgent (an agent run
	// on its own); Instance, PID and Host name that process (Instance is
	// new at each start).
	Owner    string `json:"owner,omitempty"`
	Instance string `json:"instance,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Host     string `json:"host,omitempty"`
}

// StatusPayload encodes a status message; an online one carries the time
// now.
func StatusPayload(state, device, version string, agents []string, reason string, now time.Time) []byte {
	return StatusMessage{State: state, Device: device, Version: version, Agents: agents, Reason: reason}.Payload(now)
}

// Payload encodes s; an online one carries the time now.
func (s StatusMessage) Payload(now time.Time) []byte {
	if s.Agents == nil {
		s.Agents = []string{}
	}
	if s.State == "online" {
		s.Time = now.UTC().Format(time.RFC3339)
	}
	b, _ := json.Marshal(s)
	return b
}

// ownedBy stamps s with the owner and its instance.
func (s StatusMessage) ownedBy(owner string, in Instance) StatusMessage {
	s.Owner, s.Instance, s.PID, s.Host = owner, in.ID, in.PID, in.Host
	return s
}

func (c *Client) status(state, reason string) []byte {
	return StatusMessage{State: state, Device: c.cfg.Device, Version: c.cfg.Version, Agents: c.cfg.Agents, Reason: reason}.
		ownedBy(OwnerAgent, c.instance).Payload(c.cfg.Now())
}

// Close publishes the results still waiting until ctx ends, marks the
// device offline (retained; unless NoDeviceStatus), and disconnects. It is
// safe to call more than once, and before Start.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	c.mu.Unlock()
	if !started {
		c.cancel()
		return nil
	}
	c.flush(ctx)
	if up, _ := c.connected(); up && !c.cfg.NoFleet {
		// Leave the fleet group: the persistent session would stay in it
		// and the hub would go on queueing fleet tasks for an agent that
		// is not there. What is in flight stays in the session.
		if err := c.unsubscribe(c.topics.FleetShared).Wait(ctx, 2*time.Second); err != nil {
			c.log.Warn().Err(err).Msg("mqtt: leaving the fleet group failed; the hub may queue fleet tasks for this agent until it returns")
		} else {
			c.log.Info().Str("topic", c.topics.FleetShared).Msgf("mqtt: left the fleet group (unsubscribed from %s)", c.topics.FleetShared)
		}
	}
	if up, _ := c.connected(); up && !c.cfg.NoDeviceStatus {
		_ = c.publish(c.topics.Status, true, c.status("offline", "stopped")).Wait(ctx, 2*time.Second)
	}
	c.stop()
	return nil
}

// stop ends the goroutines and the connection: DISCONNECT (the broker
// then drops the last will), after what was written before it.
func (c *Client) stop() {
	c.cancel()
	c.mu.Lock()
	c.closed = true
	nc := c.nc
	c.mu.Unlock()
	if nc != nil {
		c.writeOn(nc, wire.DisconnectPacket)
		nc.Close()
	}
	c.wg.Wait()
}

// flush waits until every result handed over is confirmed, ctx ends, or the
// broker is unreachable.
func (c *Client) flush(ctx context.Context) {
	for {
		if c.waitingN.Load() == 0 {
			return
		}
		if up, _ := c.connected(); !up {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Interface guards.
var _ agent.Outbox = (*Client)(nil)
