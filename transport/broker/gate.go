package broker

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultAckHold is how long the broker waits for the persistent subscribers
// of a QoS 1 message to acknowledge it before it stores the message itself
// and acknowledges the publisher.
const DefaultAckHold = 200 * time.Millisecond

// ResultAckDelay bounds how long the PUBACK of an agent's result waits for
// the next packet to the agent.
const ResultAckDelay = 10 * time.Millisecond

// The acknowledgement gate keeps one durable copy of a QoS 1 message, not
// two. When a client publishes at QoS 1, its PUBACK is withheld until every
// subscriber with a persistent session that the message was routed to has
// acknowledged it (an OpenStarry agent acknowledges a task only once its
// snapshot holds it durably), or, failing that within the hold (or at once
// for a subscriber that is offline), until the broker has stored the
// undelivered copies in broker.db with an fsync. Either way a message whose
// PUBACK reached its publisher survives a crash of the broker: it is in the
// subscriber's store or in the broker's. A message that matched no
// persistent session is acknowledged at once and stored nowhere (no broker
// keeps it across a crash either). In the common case, an agent online and
// quick, the broker writes nothing per message.
//
// Mochi writes the PUBACK before it routes the message; the gate therefore
// sits in the connection (gateConn), where it holds the PUBACK's bytes, and
// the hooks (OnPublish, OnQosPublish, OnPublished, OnQosComplete) tell it
// which deliveries each PUBACK waits for. PUBACKs leave a connection in the
// order of their PUBLISHes, as MQTT requires; other packets are not held.
//
// A PUBACK released by a subscriber's acknowledgement leaves with the next
// packets mochi writes to its publisher, when that write comes before the
// broker's goroutine turns to other work (gateConn.releaseSoon): an agent
// acknowledges a task and publishes its result in one write, and the
// task's publisher, subscribed to the results, then gets the task's PUBACK
// and its result in one write instead of two, and wakes once.
//
// The PUBACK of an agent's result (a QoS 1 PUBLISH on a topic
// {prefix}/{device}/agents/{agent}/results, whose gate opens once routed)
// waits for the next packet the broker writes to the agent, at most
// ResultAckDelay (gateConn.releaseLater): the agent's next task, when tasks
// come one after another, so that the agent wakes once per task instead of
// twice. An agent never waits for that PUBACK before it goes on (it keeps up
// to 256 results in flight, and only drops a result from its store once
// acknowledged); any other publisher, which may wait for each PUBACK, gets
// its PUBACK at once.
type ackGate struct {
	hold    time.Duration
	persist func(cl *mqtt.Client, pk packets.Packet) // stores an undelivered copy, synced
	// lazy reports whether a topic is an agent's results topic, whose
	// PUBACKs wait for the next packet to the publisher; nil: none.
	lazy      func(topic string) bool
	lazyDelay time.Duration // how long they wait at most: ResultAckDelay

	mu sync.Mutex // guards the maps below and the gates' fields
	// routing is, per publisher client id, the QoS 1 message being routed
	// (between OnPublish and OnPublished, on the publisher's goroutine).
	routing map[string]*gate
	// waiting maps a delivery that is neither acknowledged nor stored to
	// the gate it holds.
	waiting map[delivery]*gate
	// stored holds the deliveries in broker.db (stored by the gate, by
	// mochi's hook for what the gate does not route, or left by the
	// previous run).
	stored map[delivery]struct{}
	// ownAcks holds the broker's own PUBACK records between mochi's
	// OnQosPublish and OnQosComplete of them (one step of the publisher's
	// goroutine), to tell them from a subscriber's PUBACK of a delivery
	// with the same packet id.
	ownAcks map[delivery]struct{}
}

// delivery names one in-flight QoS 1 or 2 message to a client.
type delivery struct {
	client string
	id     uint16
}

// gate is one withheld PUBACK.
type gate struct {
	conn    *gateConn
	id      uint16 // the publisher's packet id
	origin  string
	topic   string
	created int64
	lazy    bool // the PUBACK of an agent's result (ackGate.lazy)
	sealed  bool // routing finished: no more deliveries join
	// open is set, under ackGate.mu, once the PUBACK may leave; the
	// gateConn reads it under its own mutex, hence atomic.
	open    atomic.Bool
	pending map[delivery]pendingCopy
	timer   *time.Timer
}

type pendingCopy struct {
	cl *mqtt.Client
	pk packets.Packet
}

func newAckGate(hold time.Duration, persist func(*mqtt.Client, packets.Packet)) *ackGate {
	return &ackGate{hold: hold, persist: persist, routing: map[string]*gate{},
		waiting: map[delivery]*gate{}, stored: map[delivery]struct{}{}, ownAcks: map[delivery]struct{}{}}
}

// persistent reports whether a client's session outlives its connection,
// and so must outlive a crash of the broker.
func persistent(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func offline(cl *mqtt.Client) bool { return cl.Net.Conn == nil || cl.Closed() }

// publish starts a gate for a QoS 1 message from cl (OnPublish).
func (a *ackGate) publish(cl *mqtt.Client, pk packets.Packet) {
	gc, ok := cl.Net.Conn.(*gateConn)
	if !ok || cl.Net.Inline || pk.FixedHeader.Qos != 1 {
		return
	}
	g := &gate{conn: gc, id: pk.PacketID, origin: cl.ID, topic: pk.TopicName, created: pk.Created,
		lazy: a.lazy != nil && a.lazy(pk.TopicName), pending: map[delivery]pendingCopy{}}
	a.mu.Lock()
	a.routing[cl.ID] = g
	a.mu.Unlock()
	gc.expect(g)
	// Whatever happens to the routing (a hook that drops the message
	// after this one), the gate neither holds the PUBACK nor leaves a copy
	// unstored for longer than the hold.
	g.timer = time.AfterFunc(a.hold, func() { a.expire(g) })
}

// published seals the gate of the message cl just routed (OnPublished).
func (a *ackGate) published(cl *mqtt.Client, pk packets.Packet) {
	a.mu.Lock()
	g := a.routing[cl.ID]
	if g == nil || g.id != pk.PacketID {
		a.mu.Unlock()
		return
	}
	delete(a.routing, cl.ID)
	g.sealed = true
	a.openIfDone(g, false)
}

// openIfDone opens g when it is sealed and waits for nothing more, and
// writes the PUBACKs that can leave: with the next write to the publisher
// when another client's goroutine opens it (soon: gateConn.releaseSoon),
// with the next write within ResultAckDelay when it is an agent's result's
// (gateConn.releaseLater), else at once. It is called with a.mu held, and
// releases it.
func (a *ackGate) openIfDone(g *gate, soon bool) {
	ready := g.sealed && !g.open.Load() && len(g.pending) == 0
	if ready {
		g.open.Store(true)
		g.timer.Stop()
	}
	a.mu.Unlock()
	switch {
	case !ready:
	case soon:
		g.conn.releaseSoon()
	case g.lazy:
		g.conn.releaseLater(a.lazyDelay)
	default:
		g.conn.release()
	}
}

// qosPublish decides what becomes of one outgoing QoS 1/2 packet
// (OnQosPublish); it reports whether mochi's store must write it.
func (a *ackGate) qosPublish(cl *mqtt.Client, pk packets.Packet, resends int) bool {
	d := delivery{cl.ID, pk.PacketID}
	switch pk.FixedHeader.Type {
	case packets.Puback:
		// The broker's own acknowledgement of a QoS 1 message: nothing to
		// resend after a restart, nothing to store.
		a.mu.Lock()
		a.ownAcks[d] = struct{}{}
		a.mu.Unlock()
		return false
	case packets.Publish:
	default:
		return true // QoS 2 exchanges keep mochi's behaviour
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.stored[d]; ok {
		return true // a stored copy is updated (resent)
	}
	if _, ok := a.waiting[d]; ok {
		return false // a resend of a copy that a gate waits for
	}
	if !persistent(cl) {
		return false // the session ends with the broker anyway
	}
	g := a.routing[pk.Origin]
	if g == nil || resends > 0 || g.sealed || g.topic != pk.TopicName || g.created != pk.Created || offline(cl) {
		a.stored[d] = struct{}{}
		return true
	}
	g.pending[d] = pendingCopy{cl: cl, pk: pk}
	a.waiting[d] = g
	return false
}

// complete ends one outgoing packet (OnQosComplete, OnQosDropped); it
// reports whether mochi's store must delete it.
func (a *ackGate) complete(cl *mqtt.Client, pk packets.Packet) bool {
	d := delivery{cl.ID, pk.PacketID}
	a.mu.Lock()
	if _, ok := a.ownAcks[d]; ok && pk.FixedHeader.Type == packets.Puback {
		delete(a.ownAcks, d)
		a.mu.Unlock()
		return false
	}
	if g, ok := a.waiting[d]; ok {
		delete(a.waiting, d)
		delete(g.pending, d)
		a.openIfDone(g, true)
		return false
	}
	_, ok := a.stored[d]
	delete(a.stored, d)
	a.mu.Unlock()
	// A packet of a QoS 2 exchange, or one the gate does not know (stored
	// by an older version), is deleted as mochi would.
	return ok || (pk.FixedHeader.Type != packets.Puback && pk.FixedHeader.Type != packets.Publish)
}

// loaded records a delivery the previous run left in broker.db.
func (a *ackGate) loaded(client string, id uint16) {
	a.mu.Lock()
	a.stored[delivery{client, id}] = struct{}{}
	a.mu.Unlock()
}

// expire stores the copies a gate still waits for and opens it.
func (a *ackGate) expire(g *gate) {
	a.mu.Lock()
	if g.open.Load() {
		a.mu.Unlock()
		return
	}
	if a.routing[g.origin] == g {
		delete(a.routing, g.origin)
	}
	// Under the lock, so that an acknowledgement arriving meanwhile finds
	// the copy stored and deletes it.
	for d, c := range g.pending {
		a.persist(c.cl, c.pk)
		delete(a.waiting, d)
		a.stored[d] = struct{}{}
	}
	g.pending = nil
	g.sealed = true
	g.open.Store(true)
	a.mu.Unlock()
	g.conn.release()
}

// gateListener hands out gateConns.
type gateListener struct{ net.Listener }

func (l gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gateConn{Conn: c, gates: map[uint16]*gate{}}, nil
}

// gateConn is a client's connection whose PUBACKs wait for their gates.
// Mochi writes whole packets in each Write.
type gateConn struct {
	net.Conn
	mu    sync.Mutex       // guards the fields below; serialises writes to Conn
	gates map[uint16]*gate // by the publisher's packet id
	held  []heldAck        // withheld PUBACKs, in order
	// out holds PUBACKs released and not yet written (releaseSoon): they
	// go out ahead of the next Write, or by the flusher.
	out      []byte
	flushing bool // a flusher is scheduled
	// later schedules the flusher; nil: goSoon. Tests set it.
	later func(func())
	// timer writes out when no write took it within the delay of
	// releaseLater; timed: it is set.
	timer *time.Timer
	timed bool
}

// maxOut bounds the capacity of a gateConn's out kept between writes.
const maxOut = 64 << 10

// maxLater is how many PUBACKs of an agent's results wait for the next
// packet to the agent at the most (releaseLater); pubackLen is the length
// of an MQTT 3.1.1 PUBACK (a version 5 one is as long when it succeeds).
const (
	maxLater  = 128
	pubackLen = 4
)

type heldAck struct {
	id  uint16
	raw []byte
}

func (c *gateConn) expect(g *gate) {
	c.mu.Lock()
	c.gates[g.id] = g
	c.mu.Unlock()
}

// Write passes every packet but a PUBACK whose gate is closed, or one
// behind a withheld PUBACK.
func (c *gateConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// out is what goes out: p itself while nothing in it is held (most
	// writes: no copy), else a copy without the held PUBACKs.
	var out []byte
	copied := false
	rest := p
	for len(rest) > 0 {
		n, ok := packetLen(rest)
		if !ok { // not whole packets: pass the rest as it is
			if copied {
				out = append(out, rest...)
			}
			break
		}
		pkt := rest[:n]
		rest = rest[n:]
		pass := true
		if pkt[0]>>4 == packets.Puback && n >= 1+varintLen(pkt[1:])+2 {
			hdr := 1 + varintLen(pkt[1:])
			id := uint16(pkt[hdr])<<8 | uint16(pkt[hdr+1])
			g := c.gates[id]
			if len(c.held) > 0 || (g != nil && !g.open.Load()) {
				c.held = append(c.held, heldAck{id: id, raw: append([]byte(nil), pkt...)})
				pass = false
			} else {
				delete(c.gates, id)
			}
		}
		switch {
		case !pass && !copied:
			out = append(make([]byte, 0, len(p)), p[:len(p)-len(rest)-n]...)
			copied = true
		case pass && copied:
			out = append(out, pkt...)
		}
	}
	if !copied {
		out = p
	}
	if len(c.out) > 0 && len(out) > 0 {
		// The PUBACKs released before this write go out ahead of it, in
		// the same write.
		out = append(c.out, out...)
		c.taken()
	}
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// release writes the withheld PUBACKs whose gates are open, in order,
// now (after those released before and not yet written).
func (c *gateConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.take()
	c.writeOut()
}

// releaseSoon is release for a goroutine other than the publisher's: it
// leaves the PUBACKs it releases to the next Write, and schedules a flusher
// that writes them if no Write took them by then. The flusher yields the
// processor once before it looks (goSoon), so that the publisher's write
// loop, woken by the same packets of a subscriber that released the
// PUBACKs (an agent's write: the task's PUBACK, then its result, which goes
// to the task's publisher), writes first and takes them along.
func (c *gateConn) releaseSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.take()
	if len(c.out) == 0 || c.flushing {
		return
	}
	c.flushing = true
	later := c.later
	if later == nil {
		later = goSoon
	}
	later(c.flush)
}

// releaseLater is release for the PUBACK of an agent's result: it leaves
// the PUBACKs it releases to the next Write, for at most delay, and while
// they are fewer than maxLater.
func (c *gateConn) releaseLater(delay time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.take()
	if len(c.out) >= maxLater*pubackLen {
		// An agent publishes at most 256 results before their PUBACKs
		// (transport/mqtt's publishWindow): a burst of results with no
		// task after it would wait for the timer at every window.
		c.writeOut()
		return
	}
	if len(c.out) == 0 || c.timed || c.flushing {
		return
	}
	c.timed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(delay, c.flushTimed)
	} else {
		c.timer.Reset(delay)
	}
}

// flushTimed is the timer of releaseLater.
func (c *gateConn) flushTimed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed {
		c.writeOut()
	}
}

// flush writes the PUBACKs released and not yet written.
func (c *gateConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushing = false
	c.writeOut()
}

// take moves the withheld PUBACKs whose gates are open, in order, to out;
// c.mu is held.
func (c *gateConn) take() {
	for len(c.held) > 0 {
		h := c.held[0]
		if g := c.gates[h.id]; g != nil && !g.open.Load() {
			break
		}
		delete(c.gates, h.id)
		c.out = append(c.out, h.raw...)
		c.held[0] = heldAck{}
		c.held = c.held[1:]
	}
}

// writeOut writes out; c.mu is held.
func (c *gateConn) writeOut() {
	if len(c.out) == 0 {
		return
	}
	_, _ = c.Conn.Write(c.out) // a broken connection: the publisher sends again
	c.taken()
}

// taken empties out, once written, and stops the timer of releaseLater;
// c.mu is held.
func (c *gateConn) taken() {
	c.out = c.out[:0]
	if cap(c.out) > maxOut {
		c.out = nil
	}
	if c.timed {
		c.timed = false
		c.timer.Stop()
	}
}

// goSoon runs f on a goroutine of its own once the scheduler has run the
// goroutines ready before it.
func goSoon(f func()) {
	go func() {
		runtime.Gosched()
		f()
	}()
}

// packetLen is the length of the MQTT packet at the start of p.
func packetLen(p []byte) (int, bool) {
	if len(p) < 2 {
		return 0, false
	}
	rem, mul := 0, 1
	for i := 1; i < len(p) && i <= 4; i++ {
		rem += int(p[i]&0x7f) * mul
		if p[i]&0x80 == 0 {
			n := 1 + i + rem
			return n, n <= len(p)
		}
		mul *= 128
	}
	return 0, false
}

// varintLen is the length of the remaining-length field at the start of p.
func varintLen(p []byte) int {
	for i := 0; i < len(p) && i < 4; i++ {
		if p[i]&0x80 == 0 {
			return i + 1
		}
	}
	return 4
}
