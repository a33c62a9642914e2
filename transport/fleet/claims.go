package fleet

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// ClaimTopic is where the claim of a fleet task is retained.
func ClaimTopic(prefix, taskID string) string { return mqtt.FleetClaimTopic(prefix, taskID) }

// Claim states.
const (
	ClaimRunning = "running" // claimed; the task is queued or running
	ClaimDone    = "done"    // its result was delivered
)

// Claim is the retained payload of ClaimTopic.
type Claim struct {
	TaskID string `json:"task_id"`
	Device string `json:"device"`
	// Agent is the agent of Device that claimed it (absent in the claims
	// of versions before it).
	Agent   string    `json:"agent,omitempty"`
	State   string    `json:"state"`
	Expires time.Time `json:"expires"`
	Nonce   string    `json:"nonce"`
	// Restore marks a claim published again by a device that lost the
	// race to it: it is the owner's, whatever came before.
	Restore bool `json:"restore,omitempty"`

	// capped: Expires was cut to the state's TTL from when this device
	// saw the claim (not sent).
	capped bool
}

// Defaults of ClaimsConfig.
const (
	DefaultClaimRunTTL  = time.Hour
	DefaultClaimDoneTTL = 24 * time.Hour
	DefaultDefendFor    = 10 * time.Second
	DefaultClaimGrace   = 10 * time.Second
)

// ClaimsConfig configures Claims.
type ClaimsConfig struct {
	Broker                    string
	Username, Password        string
	CAFile, CertFile, KeyFile string
	Prefix, Device            string
	// Agent is the agent whose fleet tasks these claims gate: the client
	// id is the agent's with "-claims" (ClaimsClientID), so that two
	// processes of one device never take each other's connection.
	Agent string
	// RunTTL is how long a claim holds while its task is queued or runs;
	// a device that died with it holds it that long. Default 1h.
	RunTTL time.Duration
	// DoneTTL is how long the claim of a task whose result was delivered
	// keeps other devices from running it again; then it is cleared.
	// Default 24h.
	DoneTTL time.Duration
	// DefendFor is how long, at least, this agent defends a claim it won
	// (below, Claims): while its task is queued or runs, and until
	// DefendFor after it won the claim, done or not; its done claim goes
	// then. Default DefaultDefendFor.
	DefendFor time.Duration
	// Grace is how long a claim made over a claim of this agent that it
	// did not make in this run waits for the holder to put its own back
	// before it is taken as won. Default DefaultClaimGrace.
	Grace time.Duration
	Log   zerolog.Logger
}

// Claims makes a fleet task run on one device only. Before a fleet task
// runs, the device subscribes to that task's claim topic alone, waits
// until it has seen what the hub retained there (the barrier below), and,
// unless another's claim holds, publishes its claim there, retained, and
// waits for the broker to send it back: the
// broker sends one topic's messages to every subscriber in one order, and a
// claim retained before the subscription comes first, so every device that
// claims a task agrees that the first claim of it wins. A device that lost
// publishes the winner's claim again (Restore), since its own overwrote the
// retained copy, drops the task and names the owner. Then it unsubscribes.
//
// The winner keeps the topic subscribed while it holds the task, and for
// DefendFor after it won it: a claim of another that comes over its own (a
// loser killed before it restored the winner's claim leaves its own
// retained) is answered with the winner's claim again (defendAgainst). A
// device that finds a running claim of its own it did not make in this run
// (made before a restart: won, or lost?) claims again and takes the task
// only when no holder answers within Grace (awaitGrace).
//
// So a fleet task costs the same few messages whatever the size of the
// fleet (only the device that got it, and the hub, take part: the claim,
// its echo, the done claim, its clearing), and a device keeps only the
// claims of the tasks it is deciding and of those it owns (their ids and
// expiries, to clear them). No device downloads the fleet's claims.
//
// What remains (docs/fleet.md): a broker that does not keep one order
// per topic for all subscribers (a cluster of brokers), a claim that
// expired, the retained claims lost by the broker, and a race whose winner
// and loser are both killed within a round trip, or whose losing claim or
// the winner's answer takes longer than DefendFor or Grace.
type Claims struct {
	cfg    ClaimsConfig
	client *hubConn

	mu        sync.Mutex // guards the fields below
	ready     chan struct{}
	isReady   bool
	up        bool                      // connected
	disabled  bool                      // the broker refuses the claims: tasks run unclaimed
	seen      map[string]Claim          // task id → the claim that holds, for tasks being decided or owned and not done
	deciding  map[string]int            // task id → Claim calls subscribed to its topic
	pending   map[string]chan claimWait // nonce → the Claim call waiting for its echo
	held      []heldAnswer              // answers of claims that came back, held while others wait (answerClaim)
	heldTimer *time.Timer               // releases held after releaseHold
	answered  uint64                    // groups of answers given
	clear     []doneClaim               // this device's done claims, oldest first: cleared when they expire
	received  uint64                    // claim messages received
	stop      context.CancelFunc

	// lost: task id → the claim this agent lost to, until it expires
	// (lostOrder, oldest first, bounds them to MaxLostClaims). A claim of
	// this agent's that is retained again later (a third device took it for
	// the holder while it was, and restored it) does not make the task
	// this agent's.
	lost      map[string]Claim
	lostOrder []string

	// defend: task id → the claim this agent won and holds, while its
	// task is queued or runs and for DefendFor after it was won: its topic
	// stays subscribed, and a claim of another claimant that comes over it
	// (retained is the last one written) is answered with this agent's
	// claim again (defendAgainst).
	defend   map[string]*defence
	guardQ   []string // tasks done whose done claims wait for the end of their defence (guards)
	restores uint64   // claims this agent put back over another's
	// probing: task id → the claim made over a claim of this agent's that
	// it did not make in this run, waiting out Grace for the holder's
	// answer (awaitGrace); a claim of another restored over it comes here.
	probing map[string]chan Claim

	// The subscriptions to claim topics are made and ended in batches by
	// one goroutine (subscriptions): one SUBSCRIBE packet for every claim
	// topic asked for while the previous one was on its way, one
	// UNSUBSCRIBE for every topic decided meanwhile. That goroutine alone
	// hands them to the client, so the hub sees them in the order decided
	// here.
	subQ      map[string][]chan subResult // topic → the Claim calls waiting for its SUBACK
	unsubQ    map[string]bool             // topics decided, to unsubscribe
	flushWait []chan struct{}             // Done calls waiting for unsubQ to be sent
	wake      chan struct{}
	batches   [2]uint64 // SUBSCRIBE and UNSUBSCRIBE packets sent
	closed    bool      // Close was called: no more subscriptions

	// The barrier of a batch: after its SUBACK, subscriptions publishes a
	// message to barrierTopic (which every SUBSCRIBE also carries), and
	// answers the batch's Claim calls only once onClaim has handled it.
	// The hub handles one client's packets in order and queues a
	// subscription's retained messages before it handles the next packet,
	// and hubConn hands this connection's messages to onClaim one at a
	// time in arrival order: so when the barrier is handled, the retained
	// claims of the batch's topics have been handled too. A SUBACK is no
	// such barrier: a broker may queue a subscription's retained messages
	// behind its SUBACK (and paho, which this connection used before,
	// completed the token when it read the SUBACK, before the messages
	// read ahead of it reached the handler). Without
	// it a device could publish its claim over a claim it had not seen
	// yet (a done one, say), and a device killed before its claim came
	// back found it retained afterwards and ran the task a second time.
	barrierTopic string
	barriers     map[string]chan struct{} // nonce → closed when its barrier message was handled
	noBarrier    bool                     // the hub refuses the barrier topic: claims go without it (logged)
	barrierCount uint64                   // barrier messages handled

	linger time.Duration // batchLinger when made
}

// subResult is the hub's answer to the subscription to one claim topic.
type subResult struct {
	code byte // the SUBACK return code; 0x80 refused
	err  error
}

// doneClaim is a claim of this device to clear at expires.
type doneClaim struct {
	taskID  string
	expires time.Time
}

// MaxLostClaims bounds the claims a device remembers having lost to.
const MaxLostClaims = 10_000

// MaxDoneClaims bounds the done claims a device remembers to clear; beyond
// it the oldest are cleared early (logged), so that a repeated task id may
// run again sooner than DoneTTL.
const MaxDoneClaims = 200_000

type claimWait struct {
	won   bool
	owner string
}

func init() {
	mqtt.RegisterClaims(func(c mqtt.Config) (mqtt.Claims, error) {
		return NewClaims(ClaimsConfig{Broker: c.Broker, Username: c.Username, Password: c.Password,
			CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, Prefix: c.TopicPrefix, Device: c.Device,
			Agent: c.Agent, Log: c.Log.With().Str("component", "claims").Logger()})
	})
}

// StartClaims is NewClaims, then Connect.
func StartClaims(cfg ClaimsConfig) (*Claims, error) {
	c, err := NewClaims(cfg)
	if err != nil {
		return nil, err
	}
	c.Connect()
	return c, nil
}

// Connect connects in the background, again after every loss; Claim waits
// for the first connection.
func (c *Claims) Connect() {
	c.client.start()
}

// ClaimsClientID is the client id of an agent's claims connection
// (clean session): openstarry-{device}-{agent}-claims. Without an agent, a
// random one.
func ClaimsClientID(device, agent string) string {
	if agent == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		agent = "x" + hex.EncodeToString(b)
	}
	return mqtt.ClientID(device, agent) + "-claims"
}

// BarrierTopic is the topic of the barrier messages of a claims
// connection: under the device's own topics, which its hub user may use.
func BarrierTopic(prefix, device, clientID string) string {
	return prefix + "/" + device + "/claims/barrier/" + clientID
}

// NewClaims returns Claims that are not connected yet.
func NewClaims(cfg ClaimsConfig) (*Claims, error) {
	if cfg.RunTTL <= 0 {
		cfg.RunTTL = DefaultClaimRunTTL
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = DefaultClaimDoneTTL
	}
	if cfg.DefendFor <= 0 {
		cfg.DefendFor = DefaultDefendFor
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultClaimGrace
	}
	u, secure, err := mqtt.ParseBrokerURL(cfg.Broker)
	if err != nil {
		return nil, err
	}
	clientID := ClaimsClientID(cfg.Device, cfg.Agent)
	c := &Claims{cfg: cfg, ready: make(chan struct{}), seen: map[string]Claim{}, deciding: map[string]int{},
		pending: map[string]chan claimWait{}, lost: map[string]Claim{}, subQ: map[string][]chan subResult{}, unsubQ: map[string]bool{},
		wake: make(chan struct{}, 1), barriers: map[string]chan struct{}{}, defend: map[string]*defence{}, probing: map[string]chan Claim{},
		linger: batchLinger}
	c.barrierTopic = BarrierTopic(cfg.Prefix, cfg.Device, clientID)
	var tc *tls.Config
	if secure {
		if tc, err = mqtt.TLSConfig(u, secure, cfg.CAFile, cfg.CertFile, cfg.KeyFile); err != nil {
			return nil, err
		}
	}
	// Every message of this connection is a claim (or a barrier): they all
	// go to onClaim, one at a time, in the order they came.
	c.client = newHubConn(hubConfig{url: u, tc: tc, clientID: clientID, user: cfg.Username, pass: cfg.Password,
		keepAlive: 30 * time.Second, handler: c.onClaim, log: cfg.Log,
		onUp: func() {
			c.mu.Lock()
			c.up = true
			if !c.isReady {
				c.isReady = true
				close(c.ready)
				c.cfg.Log.Info().Msgf("fleet: connected for the claims (%s)", ClaimTopic(c.cfg.Prefix, "{task_id}"))
			}
			c.mu.Unlock()
		},
		onDown: func(error) {
			c.mu.Lock()
			c.up = false
			c.mu.Unlock()
		}})
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.sweep(ctx)
	go c.subscriptions(ctx)
	go c.guards(ctx)
	return c, nil
}

// Close disconnects.
func (c *Claims) Close() {
	c.finishDue(true)
	c.stop()
	c.client.Close()
}

// Held returns how many claims the device keeps in memory: those being
// decided or owned and not done, and the done ones it is to clear.
func (c *Claims) Held() (claims, done int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), len(c.clear)
}

// Received returns how many claim messages the device received.
func (c *Claims) Received() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.received
}

// sameOwner reports whether two claims name the same claimant: a device,
// and the agent on it (two agents of one device that both take fleet tasks
// are two claimants). A claim without an agent (an older version's) names
// the device.
func sameOwner(a, b Claim) bool {
	return a.Device == b.Device && (a.Agent == b.Agent || a.Agent == "" || b.Agent == "")
}

// onClaim keeps the claim that holds for a task being decided; the order
// of arrival decides between two claimants.
func (c *Claims) onClaim(topic string, payload []byte, retained bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if topic == c.barrierTopic {
		if ch, ok := c.barriers[string(payload)]; ok {
			delete(c.barriers, string(payload))
			c.barrierCount++
			close(ch)
		}
		return
	}
	taskID := topic[strings.LastIndexByte(topic, '/')+1:]
	c.received++
	d := c.defend[taskID]
	if c.deciding[taskID] == 0 && d == nil {
		return // decided already: a late message of an unsubscribed topic
	}
	if len(payload) == 0 {
		if d != nil {
			c.defendAgainst(taskID, d, Claim{}, time.Now()) // cleared under it
		} else {
			delete(c.seen, taskID)
		}
		return
	}
	now := time.Now()
	cl, ok := decodeClaim(taskID, payload, now, c.cfg.RunTTL, c.cfg.DoneTTL)
	if !ok {
		return
	}
	if d != nil {
		c.defendAgainst(taskID, d, cl, now)
	}
	if c.deciding[taskID] == 0 {
		return
	}
	if ch := c.probing[taskID]; ch != nil && cl.Restore && !sameOwner(cl, Claim{Device: c.cfg.Device, Agent: c.cfg.Agent}) {
		select {
		case ch <- cl: // the holder answered the claim awaitGrace waits on
		default:
		}
	}
	c.decide(taskID, cl, retained, now)
}

// decodeClaim decodes the claim retained or published on the claim topic
// of taskID; ok is false for anything else (not JSON, another task's, no
// device). Its expires is capped to the state's TTL from now (capped set):
// a device user's claim that expires in 2099 would otherwise stop the task
// for good.
func decodeClaim(taskID string, payload []byte, now time.Time, runTTL, doneTTL time.Duration) (cl Claim, ok bool) {
	if json.Unmarshal(payload, &cl) != nil || cl.TaskID != taskID || cl.Device == "" {
		return Claim{}, false
	}
	ttl := runTTL
	if cl.State == ClaimDone {
		ttl = doneTTL
	}
	if limit := now.Add(ttl); cl.Expires.After(limit) {
		cl.Expires, cl.capped = limit, true
	}
	return cl, true
}

// decide keeps the claim that holds for a task being decided, and answers
// the Claim call whose claim came back (c.mu held).
func (c *Claims) decide(taskID string, cl Claim, retained bool, now time.Time) {
	prev, had := c.seen[taskID]
	holds := had && !sameOwner(prev, cl) && now.Before(prev.Expires)
	if ch, mine := c.pending[cl.Nonce]; mine && cl.Device == c.cfg.Device && cl.Agent == c.cfg.Agent {
		delete(c.pending, cl.Nonce)
		if lt, ok := c.lost[taskID]; ok && now.Before(lt.Expires) && (!had || sameOwner(prev, cl)) {
			// This agent lost the task before, to lt; what holds now
			// names this agent (or nothing) because a device restored
			// this agent's losing claim, taking it for the holder while
			// it was retained (between it and this agent's restore of
			// the winner's). The winner holds.
			prev, had, holds = lt, true, true
		}
		if had && sameOwner(prev, cl) && prev.State == ClaimDone && now.Before(prev.Expires) {
			// A copy of a task this agent already ran: its done claim
			// holds, and is put back over the running one just made (a
			// running claim holds only RunTTL for the others, after which
			// a copy would run again elsewhere). The agent answers the
			// copy from its stored result.
			delete(c.seen, taskID)
			restore := prev
			restore.Restore = true
			b, _ := json.Marshal(restore)
			c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), true, false, b)
			c.answerClaim(ch, claimWait{won: true, owner: cl.Device})
			return
		}
		if holds {
			c.answerClaim(ch, claimWait{owner: prev.Device})
			c.remember(taskID, prev)
			restore := prev
			restore.Restore = true
			b, _ := json.Marshal(restore)
			c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), true, false, b)
			return
		}
		c.seen[taskID] = cl
		if c.probing[taskID] == nil {
			// Won: defended from now on, before any later claim of
			// another is handled (it is the next message, in a race).
			c.defend[taskID] = &defence{claim: cl, until: now.Add(c.cfg.DefendFor)}
		}
		c.answerClaim(ch, claimWait{won: true, owner: cl.Device})
		return
	}
	if retained || cl.Restore || !holds {
		c.seen[taskID] = cl
	}
}

// releaseHold bounds how long answerClaim holds the answer of a claim
// that came back while others wait for theirs.
var releaseHold = 5 * time.Millisecond

// heldAnswer is the answer of a Claim call that answerClaim holds.
type heldAnswer struct {
	ch chan claimWait
	w  claimWait
}

// answerClaim answers a Claim call whose claim came back. While other
// claims of this agent wait for theirs (those of a batch go together),
// the answers are held, up to releaseHold, and given together when the
// last comes: the batch's tasks then reach the agent together and are
// saved together, where each woke the agent for a save of its own
// (docs/fleet.md). The decision itself is made and kept at once (c.mu
// held).
func (c *Claims) answerClaim(ch chan claimWait, w claimWait) {
	c.held = append(c.held, heldAnswer{ch, w})
	if len(c.pending) == 0 {
		c.releaseHeld()
		return
	}
	if c.heldTimer == nil {
		c.heldTimer = time.AfterFunc(releaseHold, func() {
			c.mu.Lock()
			c.releaseHeld()
			c.mu.Unlock()
		})
	}
}

// releaseHeld gives the answers answerClaim holds (c.mu held).
func (c *Claims) releaseHeld() {
	if len(c.held) == 0 {
		return
	}
	for _, h := range c.held {
		h.ch <- h.w // buffered: one answer per Claim call
	}
	clear(c.held)
	c.held = c.held[:0]
	c.answered++
	if c.heldTimer != nil {
		c.heldTimer.Stop()
		c.heldTimer = nil
	}
}

// defence is a claim this agent won and holds.
type defence struct {
	claim    Claim
	until    time.Time // defended at least until then, done or not
	done     bool      // Done was called: the done claim goes at until
	restored int       // times this agent put it back
}

// maxRestores bounds the times an agent puts back one claim it holds: two
// agents that both hold a task (a claim taken for expired by one of them,
// a cluster of brokers) answer each other a few times, not forever.
const maxRestores = 4

// MaxGuarded bounds the done tasks whose claims are defended until
// DefendFor after they were won; beyond it, a done task's claim becomes
// done at once (its defence ends early).
const MaxGuarded = 10_000

// defendAgainst answers a claim of another claimant (or a clearing: cl
// has no device) that came over the one this agent holds: the two were made within a round trip of each other,
// this agent's came first (it won), the other came second and, retained
// being the last one written, is what the hub keeps now. Its claimant puts
// this agent's claim back once its own came back to it; killed before,
// it never does, and when it came back a copy of the task still in its
// session found its own claim and ran the task a second time. So the
// holder puts its claim back itself, marked restore (c.mu held).
func (c *Claims) defendAgainst(taskID string, d *defence, cl Claim, now time.Time) {
	if sameOwner(d.claim, cl) || d.restored >= maxRestores || !now.Before(d.claim.Expires) {
		return
	}
	d.restored++
	c.restores++
	restore := d.claim
	restore.Restore = true
	b, _ := json.Marshal(restore)
	c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), true, false, b)
	over := cl.Device + "/" + cl.Agent
	if cl.Device == "" {
		over = "(cleared)"
	}
	c.cfg.Log.Info().Str("task", taskID).Str("over", over).Bool("restore", cl.Restore).
		Msg("fleet: another claim came over this agent's claim of a task it holds: put back")
}

// Restores returns how many times this agent put back a claim it holds
// over another's.
func (c *Claims) Restores() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restores
}

// remember records that this agent lost taskID to holder (c.mu held).
func (c *Claims) remember(taskID string, holder Claim) {
	if _, ok := c.lost[taskID]; !ok {
		c.lostOrder = append(c.lostOrder, taskID)
	}
	c.lost[taskID] = holder
	now := time.Now()
	for len(c.lostOrder) > 0 {
		old := c.lostOrder[0]
		if lt, ok := c.lost[old]; ok && now.Before(lt.Expires) && len(c.lostOrder) <= MaxLostClaims {
			break
		}
		delete(c.lost, old)
		c.lostOrder = c.lostOrder[1:]
	}
}

// ErrNoClaim is returned when the claim could not be made in time; the
// caller asks again (transport/mqtt does, for as long as it runs).
var ErrNoClaim = errors.New("fleet: the claim could not be made")

// ClaimTimeout bounds one attempt of Claim.
const ClaimTimeout = 30 * time.Second

// Claim claims taskID for this device. It returns the device that holds
// it, and whether that is this one (this agent of it).
func (c *Claims) Claim(ctx context.Context, taskID string) (ownerDevice string, mine bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, ClaimTimeout)
	defer cancel()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return "", false, fmt.Errorf("%w: not connected to the broker: %v", ErrNoClaim, ctx.Err())
	}
	c.mu.Lock()
	if c.disabled {
		c.mu.Unlock()
		return c.cfg.Device, true, nil
	}
	if c.holds(taskID) {
		c.mu.Unlock()
		return c.cfg.Device, true, nil // claimed before (a redelivery)
	}
	if c.closed {
		c.mu.Unlock()
		return "", false, fmt.Errorf("%w: %v", ErrNoClaim, errClosed)
	}
	topic := ClaimTopic(c.cfg.Prefix, taskID)
	c.deciding[taskID]++
	subbed := make(chan subResult, 1)
	// A subscription asked for again replaces the one not yet ended: the
	// hub sends the retained claim again.
	delete(c.unsubQ, topic)
	c.subQ[topic] = append(c.subQ[topic], subbed)
	c.mu.Unlock()
	c.kick()
	defer func() {
		c.mu.Lock()
		if c.deciding[taskID]--; c.deciding[taskID] <= 0 {
			delete(c.deciding, taskID)
			if c.defend[taskID] != nil {
				// Held: its topic stays subscribed, to defend the claim
				// (Done ends it).
				c.mu.Unlock()
				return
			}
			if cl, ok := c.seen[taskID]; ok && (!mine || cl.Device != c.cfg.Device || cl.Agent != c.cfg.Agent) {
				delete(c.seen, taskID) // not ours: nothing to remember
			}
			delete(c.subQ, topic) // only calls that gave up wait there now
			c.unsubQ[topic] = true
			c.mu.Unlock()
			c.kick()
			return
		}
		c.mu.Unlock()
	}()
	var sr subResult
	select {
	case sr = <-subbed:
	case <-ctx.Done():
		return "", false, fmt.Errorf("%w: subscribe %s: %v", ErrNoClaim, topic, ctx.Err())
	}
	if sr.err != nil {
		return "", false, fmt.Errorf("%w: subscribe %s: %v", ErrNoClaim, topic, sr.err)
	}
	if sr.code > 2 {
		c.mu.Lock()
		if !c.disabled {
			c.cfg.Log.Error().Str("topic", topic).Msg("fleet: the broker refused the subscription to a claim (allow devices " +
				c.cfg.Prefix + "/fleet/claims/# in its ACL): fleet tasks run unclaimed, and a task id sent twice may run on two devices")
		}
		c.disabled = true
		c.mu.Unlock()
		return c.cfg.Device, true, nil
	}
	// The barrier of the batch was handled: what the hub retained for this
	// topic before the subscription is in c.seen. A claim of another
	// claimant that holds wins, and no claim is published over it.
	c.mu.Lock()
	if c.holds(taskID) {
		// Won meanwhile by another call of this agent (another copy).
		c.mu.Unlock()
		return c.cfg.Device, true, nil
	}
	if prev, ok := c.seen[taskID]; ok && !sameOwner(prev, Claim{Device: c.cfg.Device, Agent: c.cfg.Agent}) && time.Now().Before(prev.Expires) {
		c.remember(taskID, prev)
		c.mu.Unlock()
		if prev.capped {
			// Its expires was beyond the TTL: retained again with the
			// capped one, so that it holds no longer than that for every
			// device (each would cap it anew from when it sees it).
			prev.Restore = true
			b, _ := json.Marshal(prev)
			c.client.Publish(topic, true, false, b)
		}
		return prev.Device, false, nil
	}
	var probe chan Claim
	if c.unknownOwn(taskID) {
		probe = make(chan Claim, 1)
		c.probing[taskID] = probe
		defer func() {
			c.mu.Lock()
			if c.probing[taskID] == probe {
				delete(c.probing, taskID)
			}
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	nb := make([]byte, 8)
	_, _ = rand.Read(nb)
	cl := Claim{TaskID: taskID, Device: c.cfg.Device, Agent: c.cfg.Agent, State: ClaimRunning,
		Expires: time.Now().Add(c.cfg.RunTTL).UTC(), Nonce: hex.EncodeToString(nb)}
	ch := make(chan claimWait, 1)
	c.mu.Lock()
	c.pending[cl.Nonce] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, cl.Nonce)
		if len(c.pending) == 0 {
			c.releaseHeld() // what waited for this claim's echo too
		}
		c.mu.Unlock()
	}()
	b, _ := json.Marshal(cl)
	if err := c.client.Publish(topic, true, false, b).Wait(ctx, ClaimTimeout); err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrNoClaim, err)
	}
	select {
	case w := <-ch:
		if w.won && probe != nil {
			return c.awaitGrace(ctx, taskID, cl, probe)
		}
		return w.owner, w.won, nil
	case <-ctx.Done():
		return "", false, fmt.Errorf("%w: the broker did not send the claim back", ErrNoClaim)
	}
}

// holds reports whether this agent holds taskID: it won its claim in this
// run, and the claim has not expired (c.mu held).
// (What c.seen keeps may be a claim of this agent's that it did not make
// in this run: retained, seen by a Claim call.)
func (c *Claims) holds(taskID string) bool {
	d := c.defend[taskID]
	return d != nil && time.Now().Before(d.claim.Expires)
}

// unknownOwn reports whether what the hub retained for taskID is a running
// claim of this agent's that it does not hold: one it made before a
// restart (or in a Claim call that gave up). It cannot tell "I won, and
// died before the task was durable" from "I lost, and died before I put
// the winner's claim back" (or a third device put this one back since):
// a claim made over it waits out the Grace for the holder's answer
// (awaitGrace). (c.mu held.)
func (c *Claims) unknownOwn(taskID string) bool {
	prev, ok := c.seen[taskID]
	return ok && sameOwner(prev, Claim{Device: c.cfg.Device, Agent: c.cfg.Agent}) && prev.State == ClaimRunning &&
		time.Now().Before(prev.Expires)
}

// awaitGrace decides a claim this agent made over a running claim of its
// own that it did not make in this run, and which came back first: an
// agent that holds the task defends its claim (defendAgainst), so its
// claim comes back over this one within a round trip; the task is this
// agent's only when none came within Grace. (The agent's own record of
// the task is not asked: a task it had made durable is not run again, it
// is answered from its stored result.)
func (c *Claims) awaitGrace(ctx context.Context, taskID string, mine Claim, answer <-chan Claim) (string, bool, error) {
	t := time.NewTimer(c.cfg.Grace)
	defer t.Stop()
	select {
	case holder := <-answer:
		c.mu.Lock()
		c.remember(taskID, holder)
		c.mu.Unlock()
		return holder.Device, false, nil
	case <-t.C:
	case <-ctx.Done():
		return "", false, fmt.Errorf("%w: waiting for the holder of a claim of this agent's made before: %v", ErrNoClaim, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if cl, ok := c.seen[taskID]; ok && !sameOwner(cl, mine) && now.Before(cl.Expires) {
		c.remember(taskID, cl)
		return cl.Device, false, nil
	}
	c.seen[taskID] = mine
	c.defend[taskID] = &defence{claim: mine, until: now.Add(c.cfg.DefendFor)}
	return c.cfg.Device, true, nil
}

// Done marks the claim of a task this device ran as done, for DoneTTL,
// and remembers to clear it then. A claim won less than DefendFor ago is
// defended until then, and becomes done only then (guards, in the
// background, with the others due then).
func (c *Claims) Done(taskID string) {
	c.mu.Lock()
	if d := c.defend[taskID]; d != nil {
		if d.done {
			c.mu.Unlock()
			return // told before
		}
		d.done = true
		if time.Now().Before(d.until) && len(c.guardQ) < MaxGuarded {
			c.guardQ = append(c.guardQ, taskID)
			c.mu.Unlock()
			return
		}
	}
	c.mu.Unlock()
	c.finish(taskID)
}

// finish ends the defence of a claim this agent holds, if any, and
// publishes it done.
func (c *Claims) finish(taskID string) {
	c.mu.Lock()
	var (
		b     []byte
		early []string
	)
	if d := c.defend[taskID]; d != nil {
		b, early = c.takeDone(taskID, d)
	} else if cl, ok := c.seen[taskID]; ok && cl.Device == c.cfg.Device && cl.Agent == c.cfg.Agent {
		b, early = c.takeDone(taskID, &defence{claim: cl})
	} else {
		c.mu.Unlock()
		return
	}
	flushed := c.unsubscribeFirst()
	c.mu.Unlock()
	c.waitFlushed(flushed)
	c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), true, true, b)
	c.clearEarly(early)
}

// takeDone ends what this agent keeps of a claim it holds, queues the
// end of its subscription, and returns its done claim (c.mu held).
func (c *Claims) takeDone(taskID string, d *defence) (payload []byte, early []string) {
	delete(c.defend, taskID)
	delete(c.seen, taskID)
	cl := d.claim
	cl.State, cl.Expires, cl.Restore = ClaimDone, time.Now().Add(c.cfg.DoneTTL).UTC(), false
	early = c.keepDone(taskID, cl.Expires)
	if c.deciding[taskID] == 0 {
		c.unsubQ[ClaimTopic(c.cfg.Prefix, taskID)] = true
	}
	payload, _ = json.Marshal(cl)
	return payload, early
}

// unsubscribeFirst asks subscriptions to send the queued unsubscriptions
// now, when there are any, so that the hub does not send this device its
// own done claims; waitFlushed waits for it (c.mu held).
func (c *Claims) unsubscribeFirst() chan struct{} {
	if len(c.unsubQ) == 0 {
		return nil
	}
	flushed := make(chan struct{})
	c.flushWait = append(c.flushWait, flushed)
	return flushed
}

// waitFlushed waits, up to 5 s, for what unsubscribeFirst asked.
func (c *Claims) waitFlushed(flushed chan struct{}) {
	if flushed == nil {
		return
	}
	c.kick()
	select {
	case <-flushed:
	case <-time.After(5 * time.Second):
	}
}

// guardTick is how often guards looks for done claims due.
const guardTick = 250 * time.Millisecond

// guards publishes the done claims of the tasks done whose defence ended
// (DefendFor after their claims were won), those due together: one
// UNSUBSCRIBE, then their done claims.
func (c *Claims) guards(ctx context.Context) {
	t := time.NewTicker(guardTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.finishDue(false)
	}
}

// finishDue publishes the done claims of guardQ that are due (all of them,
// at once and without unsubscribing first: Close).
func (c *Claims) finishDue(all bool) {
	now := time.Now()
	type done struct {
		taskID  string
		payload []byte
	}
	var (
		pubs  []done
		early []string
	)
	c.mu.Lock()
	if len(c.guardQ) == 0 {
		c.mu.Unlock()
		return
	}
	rest := c.guardQ[:0]
	for _, id := range c.guardQ {
		d := c.defend[id]
		switch {
		case d == nil || !d.done:
			// Ended otherwise.
		case all || !now.Before(d.until):
			b, e := c.takeDone(id, d)
			pubs, early = append(pubs, done{id, b}), append(early, e...)
		default:
			rest = append(rest, id)
		}
	}
	clear(c.guardQ[len(rest):])
	c.guardQ = rest
	var flushed chan struct{}
	if !all && len(pubs) > 0 {
		flushed = c.unsubscribeFirst()
	}
	c.mu.Unlock()
	c.waitFlushed(flushed)
	toks := make([]*hubOp, 0, len(pubs))
	for _, p := range pubs {
		toks = append(toks, c.client.Publish(ClaimTopic(c.cfg.Prefix, p.taskID), true, true, p.payload))
	}
	c.clearEarly(early)
	if all {
		// Acknowledged before the DISCONNECT (Close), within 2 s.
		deadline := time.Now().Add(2 * time.Second)
		for _, tok := range toks {
			if tok.Wait(context.Background(), time.Until(deadline)) != nil {
				break
			}
		}
	}
}

// keepDone remembers to clear the done claim of taskID at expires; it
// returns the oldest ones to clear at once, beyond MaxDoneClaims (c.mu
// held).
func (c *Claims) keepDone(taskID string, expires time.Time) (early []string) {
	if len(c.clear) >= MaxDoneClaims {
		n := len(c.clear) - MaxDoneClaims + 1
		for _, d := range c.clear[:n] {
			early = append(early, d.taskID)
		}
		c.clear = append(c.clear[:0:0], c.clear[n:]...)
	}
	c.clear = append(c.clear, doneClaim{taskID: taskID, expires: expires})
	return early
}

// clearEarly clears the done claims keepDone could not keep.
func (c *Claims) clearEarly(early []string) {
	if len(early) > 0 {
		c.cfg.Log.Warn().Int("claims", len(early)).Int("max", MaxDoneClaims).
			Msg("fleet: too many done claims to remember; the oldest are cleared before their time")
		for _, id := range early {
			c.client.Publish(ClaimTopic(c.cfg.Prefix, id), true, true, []byte{})
		}
	}
}

// kick wakes subscriptions.
func (c *Claims) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// errClosed answers the subscriptions asked for of closed Claims.
var errClosed = errors.New("the claims are closed")

// maxBatch bounds the topic filters of one SUBSCRIBE or UNSUBSCRIBE
// (about 60 KiB): the rest go in the next one.
const maxBatch = 1024

// batchLinger is the least time between two SUBSCRIBE batches, and between
// two UNSUBSCRIBE batches: the claims of a stream of fleet tasks go in one
// batch every batchLinger (or every round trip to the hub, when that is
// longer), while a claim that comes batchLinger or more after the last
// batch goes at once. A batch costs the device and the hub eight packets
// (the SUBSCRIBE, the barrier and its echo, the UNSUBSCRIBE, and their
// acknowledgements) besides its claims' own; with a hub that sends every
// packet at once (set_tcp_nodelay, as packaging/mosquitto/hub.conf sets
// it), a device of a large fleet gets every N-th fleet task, its batches
// carried one or two claims each, and the batches cost more than the
// claims; and the claims decided together make the agent save once for
// several fleet tasks, where it saved once or twice a task (make
// fleet-sim prints the saves per task; docs/fleet.md). So a fleet task in
// a stream waits up to batchLinger more for its claim, unless lingerFull
// claims wait: then their batch goes at once (a device that may hold only
// so many fleet tasks unacknowledged, Mosquitto's max_inflight_messages,
// would otherwise claim at most that many per batchLinger).
var batchLinger = 100 * time.Millisecond

// lingerFull is how many claims waiting for their batch end its wait.
const lingerFull = 16

// batchTimeout bounds the wait for a SUBACK or UNSUBACK before the next
// batch goes (the Claim calls waiting for it give up at ClaimTimeout).
const batchTimeout = ClaimTimeout

// subscriptions sends the subscriptions asked for by Claim and the
// unsubscriptions of the topics decided, in batches: one SUBSCRIBE and one
// UNSUBSCRIBE on their way at a time, each carrying every topic queued
// while the previous one was (an UNSUBSCRIBE goes at once when Done waits
// for it), two SUBSCRIBEs at least batchLinger apart, and two
// UNSUBSCRIBEs too (Done waits for the next). Under load a fleet task's
// claim then costs the hub and the device a fraction of a SUBSCRIBE and
// of an UNSUBSCRIBE round trip, where it cost one of each; idle, a
// claim's subscription goes at once.
//
// An UNSUBSCRIBE is handed to the client before a SUBSCRIBE taken at the
// same time; a topic asked for again before its UNSUBSCRIBE went leaves
// the queue of unsubscriptions (its SUBSCRIBE replaces the subscription,
// and the hub sends the retained claim again). So a Claim call's
// subscription is never ended by an UNSUBSCRIBE sent after it.
func (c *Claims) subscriptions(ctx context.Context) {
	var (
		subTok, unsubTok     *hubOp
		subDone, unsubDone   <-chan struct{}
		subTimer, unsubTimer <-chan time.Time
		batch                map[string][]chan subResult
		barrierDone          <-chan struct{}
		barrierNonce         string
		lastSub, lastUnsub   time.Time
		subLinger            <-chan time.Time
		unsubLinger          <-chan time.Time
	)
	answer := func(err error) {
		var codes map[string]byte
		if subTok != nil && err == nil {
			codes = subTok.Result()
		}
		for topic, ws := range batch {
			r := subResult{err: err}
			if err == nil {
				code, ok := codes[topic]
				if !ok {
					r.err = errors.New("no return code for it in the SUBACK")
				}
				r.code = code
			}
			for _, w := range ws {
				w <- r // buffered: one answer per waiter
			}
		}
		if barrierNonce != "" {
			c.mu.Lock()
			delete(c.barriers, barrierNonce)
			c.mu.Unlock()
		}
		subTok, subDone, subTimer, batch, barrierDone, barrierNonce = nil, nil, nil, nil, nil, ""
	}
	// barrier publishes the barrier of the batch whose SUBACK came; when
	// the hub refused its topic, the batch is answered at once (logged).
	barrier := func() {
		c.mu.Lock()
		noBarrier := c.noBarrier
		code, asked := byte(0), false
		if subTok != nil && !noBarrier {
			code, asked = subTok.Result()[c.barrierTopic]
		}
		if !noBarrier && (!asked || code > 2) {
			c.noBarrier = true
			c.cfg.Log.Error().Str("topic", c.barrierTopic).Msg("fleet: the broker refused the subscription to the claims' barrier " +
				"(allow devices their own topics, " + c.cfg.Prefix + "/{device}/#, in its ACL): a device may publish its claim " +
				"before it saw the claim retained, and a task may run twice")
		}
		if c.noBarrier {
			c.mu.Unlock()
			answer(nil)
			return
		}
		nb := make([]byte, 8)
		_, _ = rand.Read(nb)
		barrierNonce = hex.EncodeToString(nb)
		ch := make(chan struct{})
		c.barriers[barrierNonce] = ch
		c.mu.Unlock()
		barrierDone, subDone, subTimer = ch, nil, time.After(batchTimeout)
		c.client.Publish(c.barrierTopic, false, false, []byte(barrierNonce))
	}
	for {
		select {
		case <-ctx.Done():
			// Closed: the Claim calls waiting for a SUBACK, and those to
			// come, get an error at once.
			answer(errClosed)
			c.mu.Lock()
			c.closed = true
			for _, ws := range c.subQ {
				for _, w := range ws {
					w <- subResult{err: errClosed}
				}
			}
			c.subQ = map[string][]chan subResult{}
			c.mu.Unlock()
			return
		case <-c.wake:
		case <-subDone:
			if err := subTok.Err(); err != nil {
				answer(err)
			} else {
				barrier()
			}
		case <-barrierDone:
			answer(nil)
		case <-subTimer:
			if barrierNonce == "" {
				answer(errors.New("no SUBACK from the broker"))
				break
			}
			// The barrier did not come back while connected. If none
			// ever did, the hub drops it (its ACL): the claims go without
			// it from now on. Otherwise the hub is slow: the Claim calls
			// ask again.
			c.mu.Lock()
			if c.up && !c.noBarrier && c.barrierCount == 0 {
				c.noBarrier = true
				c.cfg.Log.Error().Str("topic", c.barrierTopic).Msg("fleet: the broker did not send the claims' barrier back " +
					"(allow devices their own topics, " + c.cfg.Prefix + "/{device}/#, in its ACL): a device may publish its claim " +
					"before it saw the claim retained, and a task may run twice")
			}
			c.mu.Unlock()
			answer(errors.New("no barrier message back from the broker"))
		case <-unsubDone:
			unsubTok, unsubDone, unsubTimer = nil, nil, nil
		case <-unsubTimer:
			unsubTok, unsubDone, unsubTimer = nil, nil, nil
		case <-subLinger:
			subLinger = nil
		case <-unsubLinger:
			unsubLinger = nil
		}
		c.mu.Lock()
		var unsub []string
		var flushed []chan struct{}
		unsubDue := len(c.unsubQ) > 0 && (unsubTok == nil || len(c.flushWait) > 0)
		if unsubDue && unsubLinger == nil {
			if wait := c.linger - time.Since(lastUnsub); wait > 0 {
				unsubLinger = time.After(wait)
			}
		}
		if unsubDue && unsubLinger == nil {
			lastUnsub = time.Now()
			// A flush takes them all (Done waits for its own topic).
			n := len(c.unsubQ)
			if len(c.flushWait) == 0 {
				n = min(n, maxBatch)
			}
			unsub = make([]string, 0, n)
			for topic := range c.unsubQ {
				if len(unsub) == n {
					break
				}
				unsub = append(unsub, topic)
				delete(c.unsubQ, topic)
			}
		}
		if unsub != nil || len(c.unsubQ) == 0 {
			// Done waits for the UNSUBSCRIBE of its topic, not longer:
			// at most batchLinger after the last one.
			flushed, c.flushWait = c.flushWait, nil
		}
		var filters map[string]byte
		subDue := subTok == nil && len(c.subQ) > 0
		if subDue && len(c.subQ) >= lingerFull {
			subLinger = nil // enough claims wait: their batch goes now
		}
		if subDue && subLinger == nil && len(c.subQ) < lingerFull {
			if wait := c.linger - time.Since(lastSub); wait > 0 {
				subLinger = time.After(wait)
			}
		}
		if subDue && subLinger == nil {
			lastSub = time.Now()
			batch = make(map[string][]chan subResult, min(len(c.subQ), maxBatch))
			for topic, ws := range c.subQ {
				if len(batch) == maxBatch {
					break
				}
				batch[topic] = ws
				delete(c.subQ, topic)
			}
			filters = make(map[string]byte, len(batch)+1)
			for topic := range batch {
				filters[topic] = 1
			}
			if !c.noBarrier {
				// Subscribed again with every batch (one filter more in
				// the packet): the connection is a clean session.
				filters[c.barrierTopic] = 1
			}
		}
		if unsub != nil {
			c.batches[1]++
		}
		if filters != nil {
			c.batches[0]++
		}
		c.mu.Unlock()
		if unsub != nil {
			unsubTok = c.client.Unsubscribe(unsub...)
			unsubDone, unsubTimer = unsubTok.Done(), time.After(batchTimeout)
		}
		for _, f := range flushed {
			close(f)
		}
		if filters != nil {
			subTok = c.client.Subscribe(filters)
			subDone, subTimer = subTok.Done(), time.After(batchTimeout)
		}
	}
}

// Batches returns how many SUBSCRIBE and UNSUBSCRIBE packets the claims
// sent.
func (c *Claims) Batches() (subscribe, unsubscribe uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches[0], c.batches[1]
}

// sweep clears, every minute, the retained done claims of this device that
// expired, and ends the defence of claims that expired before their task
// was done (a task that ran longer than RunTTL, or whose result never came).
func (c *Claims) sweep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var clear []string
		c.mu.Lock()
		n := 0
		for n < len(c.clear) && !now.Before(c.clear[n].expires) {
			clear = append(clear, c.clear[n].taskID)
			n++
		}
		if n > 0 {
			c.clear = append(c.clear[:0:0], c.clear[n:]...)
		}
		ended := c.endExpiredDefences(now)
		c.mu.Unlock()
		if ended {
			c.kick()
		}
		for _, id := range clear {
			c.client.Publish(ClaimTopic(c.cfg.Prefix, id), true, true, []byte{})
		}
	}
}

// endExpiredDefences ends the defence of the claims that expired while
// their task was not done, and reports whether there were any (c.mu held).
func (c *Claims) endExpiredDefences(now time.Time) bool {
	ended := false
	for id, d := range c.defend {
		if d.done || now.Before(d.claim.Expires) {
			continue
		}
		delete(c.defend, id)
		delete(c.seen, id)
		if c.deciding[id] == 0 {
			c.unsubQ[ClaimTopic(c.cfg.Prefix, id)] = true
		}
		ended = true
	}
	return ended
}
