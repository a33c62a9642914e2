package mqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/backoff"
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
type Client struct {
	cfg    Config
	log    zerolog.Logger
	url    *url.URL
	topics Topics
	pc     paho.Client

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the client's goroutines

	rt  Runtime       // set by Start before the first connection
	sem chan struct{} // bounds the tasks on their way to durability

	ackMu   sync.Mutex    // guards acks
	acks    []*taken      // the runtime's answers, for ackLoop
	ackWake chan struct{} // nudges ackLoop

	mu       sync.Mutex    // guards incoming, reports, conn, gen, started, closed
	incoming []*pending    // results handed over by Deliver, not yet seen by the publisher
	reports  []progressMsg // progress reports not yet seen by the publisher, in order
	lastSeq  uint64        // highest Seq handed over
	anySeq   bool          // lastSeq is set
	conn     bool          // a connection is up
	gen      uint64        // connections so far
	started  bool
	closed   bool

	wake       chan struct{} // nudges the publisher
	subscribed chan struct{} // closed after the first subscription attempt
	subOnce    sync.Once
	waitingN   atomic.Int64 // results handed over and not yet confirmed
	// checkEvery is how often the publish loop looks at a result waiting
	// to be published again or waiting for its PUBACK.
	checkEvery time.Duration

	reconnects atomic.Int64 // reconnection attempts since the last connection, for jitter
	store      *resumeStore // paho's store; tells which publications paho resumed
	rejected   *rejectedSet // retained messages already dead-lettered
	instance   Instance     // this process, in the status it owns

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
		topics:     TopicsFor(cfg.TopicPrefix, cfg.Device, cfg.Agent, cfg.FleetGroup),
		sem:        make(chan struct{}, cfg.MaxPendingSubmits),
		wake:       make(chan struct{}, 1),
		ackWake:    make(chan struct{}, 1),
		checkEvery: time.Second,
		subscribed: make(chan struct{}),
		store:      newResumeStore(),
		rejected:   newRejectedSet(cfg.StateDir),
		instance:   NewInstance(""),
	}
	c.log = cfg.Log.With().Str("component", "mqtt").Str("agent", cfg.Agent).Logger()
	c.ctx, c.cancel = context.WithCancel(context.Background())

	o := paho.NewClientOptions().
		AddBroker(u.String()).
		SetClientID(ClientID(cfg.Device, cfg.Agent)).
		SetCleanSession(false).
		SetProtocolVersion(4). // no silent fallback to 3.1 (a refused login would be tried twice)
		SetOrderMatters(true). // onTask only hands the message to a goroutine
		SetAutoAckDisabled(true).
		SetStore(c.store). // resumed publications keep their order
		SetKeepAlive(cfg.KeepAlive).
		SetPingTimeout(10 * time.Second).
		SetConnectTimeout(cfg.ConnectTimeout).
		SetWriteTimeout(10 * time.Second).
		SetConnectRetry(false). // the first attempt is synchronous (see Start)
		SetAutoReconnect(true).
		SetMaxReconnectInterval(cfg.MaxReconnectInterval).
		SetDefaultPublishHandler(c.onOther).
		SetOnConnectHandler(c.onConnect).
		SetConnectionLostHandler(c.onConnectionLost).
		SetReconnectingHandler(c.onReconnecting)
	if !cfg.NoDeviceStatus {
		o.SetBinaryWill(c.topics.Status, c.status("offline", "connection lost"), 1, true)
	}
	if cfg.Username != "" {
		o.SetUsername(cfg.Username)
		o.SetPassword(cfg.Password)
	}
	if tc != nil {
		o.SetTLSConfig(tc)
	}
	o.SetCustomOpenConnectionFn(Opener(tc))
	c.pc = paho.NewClient(o)
	c.pc.AddRoute(c.topics.Tasks, c.onTask)
	if !cfg.NoFleet {
		c.pc.AddRoute(c.topics.Fleet, c.onTask)
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
	c.wg.Add(2)
	go c.publishLoop()
	go c.ackLoop()

	tok := c.pc.Connect()
	err := waitToken(ctx, tok, c.cfg.ConnectTimeout+5*time.Second)
	if err == nil {
		// Return subscribed, so that what is published from now on
		// reaches the agent even on the session's very first connection.
		select {
		case <-c.subscribed:
		case <-time.After(c.cfg.ConnectTimeout):
		case <-ctx.Done():
		}
		return nil
	}
	var rc byte = packets.ErrNetworkError
	if ct, ok := tok.(*paho.ConnectToken); ok && done(tok) {
		rc = ct.ReturnCode()
	}
	if fatal := classify(rc, err); fatal != nil {
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
	go c.connectLoop()
	return nil
}

// classify returns the sentinel of a failure that retrying will not heal,
// or nil.
func classify(rc byte, err error) error {
	switch rc {
	case packets.ErrRefusedBadUsernameOrPassword:
		return ErrBadCredentials
	case packets.ErrRefusedNotAuthorised:
		return ErrNotAuthorized
	case packets.ErrRefusedBadProtocolVersion, packets.ErrRefusedIDRejected:
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

// connectLoop retries the first connection until it succeeds; paho's
// automatic reconnection takes over from there.
func (c *Client) connectLoop() {
	defer c.wg.Done()
	bo := c.backoff()
	for attempt := 2; ; attempt++ {
		if !c.sleep(bo.Delay(attempt - 2)) {
			return
		}
		tok := c.pc.Connect()
		err := waitToken(c.ctx, tok, c.cfg.ConnectTimeout+5*time.Second)
		if err == nil {
			return
		}
		if c.ctx.Err() != nil {
			return
		}
		c.log.Warn().Err(err).Int("attempt", attempt).Dur("next_in", bo.Base(attempt-1)).Str("broker", c.url.Redacted()).
			Msg("mqtt: cannot connect to the broker")
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

func (c *Client) onConnect(pc paho.Client) {
	if c.ctx.Err() != nil {
		// A connection attempt that was under way when Close ran: stop
		// disconnects it. It is not disconnected here too: paho's
		// Disconnect is not safe to run twice at once (its status's
		// willReconnect is written and read without the lock).
		return
	}
	c.reconnects.Store(0)
	c.mu.Lock()
	c.conn = true
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	c.log.Info().Str("broker", c.url.Redacted()).Str("client_id", ClientID(c.cfg.Device, c.cfg.Agent)).
		Uint64("connection", gen).Msgf("mqtt: connected to %s", c.url.Redacted())
	c.nudge()

	subs := map[string]byte{c.topics.Tasks: 1}
	if !c.cfg.NoFleet {
		subs[c.topics.FleetShared] = 1
	}
	retry := c.subscribe(pc, subs, 0)
	c.subOnce.Do(func() { close(c.subscribed) })
	if !c.cfg.NoDeviceStatus {
		if err := waitToken(c.ctx, pc.Publish(c.topics.Status, 1, true, c.status("online", "")), c.cfg.PublishTimeout); err != nil {
			c.log.Warn().Err(err).Msg("mqtt: publishing the online status failed")
		}
	}
	// What was refused or not answered is asked for again on this
	// connection, by the connection schedule, until it is granted or the
	// connection is gone: an agent never sits connected without its task
	// topics. A broker refuses a subscription for more than its ACL: the
	// embedded one also refuses a SUBSCRIBE whose packet identifier is that
	// of a message it is redelivering to the same session.
	bo := c.backoff()
	for n := 0; len(retry) > 0; n++ {
		if !c.sleep(bo.Delay(n)) {
			return
		}
		if conn, g := c.connected(); !conn || g != gen {
			return // the next connection subscribes again
		}
		retry = c.subscribe(pc, retry, n+1)
	}
}

// subscribe asks for subs and returns what was refused or not answered.
// Retries (retry > 0) log at warn level.
func (c *Client) subscribe(pc paho.Client, subs map[string]byte, retry int) map[string]byte {
	tok := pc.SubscribeMultiple(subs, nil)
	if err := waitToken(c.ctx, tok, c.cfg.ConnectTimeout); err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn().Err(err).Int("retry", retry).Msg("mqtt: subscribing failed; asking again")
		}
		return subs
	}
	st, ok := tok.(*paho.SubscribeToken)
	if !ok {
		return nil
	}
	var refused map[string]byte
	for topic, code := range st.Result() {
		if code <= 2 {
			c.log.Info().Str("topic", topic).Msgf("mqtt: subscribed to %s", topic)
			continue
		}
		ev := c.log.Error()
		if retry > 0 {
			ev = c.log.Warn()
		}
		ev.Str("topic", topic).Int("retry", retry).
			Msgf("mqtt: the broker refused the subscription to %s (check its ACL for this user); asking again", topic)
		if refused == nil {
			refused = map[string]byte{}
		}
		refused[topic] = subs[topic]
	}
	return refused
}

func (c *Client) onConnectionLost(_ paho.Client, err error) {
	c.mu.Lock()
	c.conn = false
	c.mu.Unlock()
	c.log.Warn().Err(err).Str("broker", c.url.Redacted()).
		Msg("mqtt: connection to the broker lost; reconnecting (results are kept until delivered)")
}

// onReconnecting runs before each automatic reconnection attempt, after
// paho's own exponential backoff; it adds jitter so that a fleet that lost
// its hub at once does not return at once.
func (c *Client) onReconnecting(paho.Client, *paho.ClientOptions) {
	n := c.reconnects.Add(1)
	est := min(time.Second<<min(n, 16), c.cfg.MaxReconnectInterval)
	if !c.sleep(rand.N(est/4 + 1)) {
		return
	}
	c.log.Debug().Int64("attempt", n).Msg("mqtt: reconnecting")
}

func (c *Client) connected() (bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn, c.gen
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
	if !c.cfg.NoFleet && c.pc.IsConnectionOpen() {
		// Leave the fleet group: the persistent session would stay in it
		// and the hub would go on queueing fleet tasks for an agent that
		// is not there. What is in flight stays in the session.
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := waitToken(dctx, c.pc.Unsubscribe(c.topics.FleetShared), 2*time.Second); err != nil {
			c.log.Warn().Err(err).Msg("mqtt: leaving the fleet group failed; the hub may queue fleet tasks for this agent until it returns")
		} else {
			c.log.Info().Str("topic", c.topics.FleetShared).Msgf("mqtt: left the fleet group (unsubscribed from %s)", c.topics.FleetShared)
		}
		cancel()
	}
	if c.pc.IsConnectionOpen() && !c.cfg.NoDeviceStatus {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = waitToken(dctx, c.pc.Publish(c.topics.Status, 1, true, c.status("offline", "stopped")), 2*time.Second)
		cancel()
	}
	c.stop()
	return nil
}

// stop ends the goroutines and the connection.
func (c *Client) stop() {
	c.cancel()
	c.wg.Wait()
	c.pc.Disconnect(250)
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

// resumeStore is paho's ordered memory store, adapted to what paho's
// resume (run after every connection of a persistent session) does with it:
//
//   - It keeps its own copy of a PUBLISH and hands out copies. resume sets
//     the DUP flag on the packet Get returns, while the packet Publish queued
//     may still be waiting to be written from before the reconnection, a
//     data race inside paho (eclipse-paho/paho.mqtt.golang#703); with copies
//     nothing is shared.
//   - Get marks the message id of an outbound PUBLISH that resume is about
//     to send again. resume then completes that publication's original
//     token without error although no PUBACK came (it replaces the token
//     with its own), so a token's success means nothing once its id was
//     resumed: the publisher checks ResumedSince before it confirms.
type resumeStore struct {
	*paho.OrderedMemoryStore

	mu    sync.Mutex        // guards seq and marks
	seq   uint64            // marks handed out
	marks map[uint16]uint64 // message id → seq when resume last took it
}

func newResumeStore() *resumeStore {
	return &resumeStore{OrderedMemoryStore: paho.NewOrderedMemoryStore(), marks: map[uint16]uint64{}}
}

func copyPacket(m packets.ControlPacket) packets.ControlPacket {
	if p, ok := m.(*packets.PublishPacket); ok {
		cp := *p
		return &cp
	}
	return m
}

// Put stores a copy of a PUBLISH (Publish calls it before it queues the
// packet, so nothing else touches it yet).
func (s *resumeStore) Put(key string, m packets.ControlPacket) {
	s.OrderedMemoryStore.Put(key, copyPacket(m))
}

// Get returns a copy of the stored packet; for an outbound PUBLISH (only
// resume reads those) it marks the message id as resumed.
func (s *resumeStore) Get(key string) packets.ControlPacket {
	m := s.OrderedMemoryStore.Get(key)
	if p, ok := m.(*packets.PublishPacket); ok && strings.HasPrefix(key, "o.") {
		s.mu.Lock()
		s.seq++
		s.marks[p.MessageID] = s.seq
		s.mu.Unlock()
	}
	return copyPacket(m)
}

// Mark returns the current mark; take it before publishing.
func (s *resumeStore) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// ResumedSince reports whether resume took message id after mark.
func (s *resumeStore) ResumedSince(id uint16, mark uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marks[id] > mark
}

// Interface guards.
var (
	_ agent.Outbox = (*Client)(nil)
	_ paho.Store   = (*resumeStore)(nil)
)
