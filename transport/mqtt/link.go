package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// The agent's connection to the broker is the client's own, not paho's:
// an MQTT 3.1.1 session (CleanSession false) on the codec of
// transport/mqtt/wire, the approach of the fleet's claims connection
// (transport/fleet, hubConn).
//
// Why, measured (BenchmarkMQTTIngress, BenchmarkEndToEndMQTT;
// docs/mqtt.md, "The agent's connection"): paho hands every incoming
// packet through its reader, its incoming comms and its router goroutines
// before the handler sees it, and every packet it sends through its
// outbound channel and its writer (and the project's coalescing flusher
// behind it), so a task (its PUBLISH in, its PUBACK out, its result out,
// the result's PUBACK in) woke some ten goroutines on the agent: on a slow
// board that was most of a task's processor time outside the agent's work.
// Here:
//
//   - one goroutine (run, then read) reads the connection through a
//     buffer and decodes each packet: a task PUBLISH goes to the task
//     handler (onTask) on that goroutine, which hands it to the runtime
//     without waiting (SubmitAsync); a PUBACK of a result confirms it to
//     the runtime on that goroutine (Runtime.Confirm never blocks), in
//     order; what may wait on the broker (a fleet claim, a dead letter)
//     goes to a goroutine of its own, as before;
//   - one goroutine, the publisher (publishLoop), is woken by the runtime
//     when tasks became durable and when results were saved (one save
//     answers both), and writes the tasks' PUBACKs, the progress reports
//     and the results it finds in one write: a task's "done" report, its
//     result and the next tasks' PUBACKs leave together, as they did
//     through the coalescing flusher;
//   - anything else (the status, a dead letter, SUBSCRIBE, PINGREQ) is
//     written by the goroutine that makes it; every write is whole, under
//     one mutex, within wire.WriteTimeout.
//
// Results and their PUBACKs: a result gets a packet id when first
// published and keeps it until its PUBACK, across connections; after a
// reconnection every result published and not acknowledged is published
// again, in order, with the same id and the DUP flag (MQTT 3.1.1, 4.4),
// and one whose PUBACK does not come within PublishTimeout on a live
// connection likewise. A result is confirmed only on a PUBACK carrying its
// id: nothing else completes it (paho completed the token of a publication
// it resent after a reconnection without any PUBACK; the client had to
// recognise that).

// pingTimeout is how long after a keep-alive interval the broker may stay
// silent (no PINGRESP, nothing else) before the connection is taken for
// dead.
const pingTimeout = 10 * time.Second

// maxOps bounds the packet ids waiting for an acknowledgement.
const maxOps = 60_000

// op is a publication (not a result's), subscription or unsubscription
// waiting for the broker's acknowledgement (wire.Op).
type op = wire.Op

// opRef is what a packet id waits for: an op, or a result.
type opRef struct {
	o *op
	p *pending
}

// errNotConnected fails what is asked while there is no connection, and
// what was on its way when the connection was lost.
var errNotConnected = errors.New("not connected to the broker")

// inMsg is a PUBLISH from the broker, acknowledged (Ack) once handled.
type inMsg struct {
	c        *Client
	topic    string
	payload  []byte // the client's own copy
	id       uint16
	qos      byte
	retained bool
	gen      uint64 // the connection it came on
}

func (m *inMsg) Topic() string   { return m.topic }
func (m *inMsg) Payload() []byte { return m.payload }
func (m *inMsg) Retained() bool  { return m.retained }

// Ack writes the message's PUBACK on the connection it came on. On a
// later connection it is not written: the broker delivers the message
// again there (persistent session), and it is acknowledged then.
func (m *inMsg) Ack() {
	if m.qos == 0 {
		return
	}
	c := m.c
	c.mu.Lock()
	nc := c.nc
	ok := nc != nil && c.gen == m.gen
	c.mu.Unlock()
	if ok {
		c.writeOn(nc, wire.AppendPuback(make([]byte, 0, 4), m.id))
	}
}

// dial connects to the broker (DialBroker: TCP or TLS, through the proxy
// of the environment) and logs in. code is the CONNACK's return code when
// the broker refused the login.
func (c *Client) dial(ctx context.Context) (conn net.Conn, r *bufio.Reader, code byte, err error) {
	conn, err = DialBroker(c.url, c.tc, c.cfg.ConnectTimeout)
	if err != nil {
		return nil, nil, 0, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	o := wire.ConnectOptions{ClientID: ClientID(c.cfg.Device, c.cfg.Agent), User: c.cfg.Username, Pass: c.cfg.Password,
		KeepAlive: c.cfg.KeepAlive}
	if c.will != nil {
		o.WillTopic, o.WillPayload, o.WillQoS, o.WillRetain = c.topics.Status, c.will, 1, true
	}
	r, code, err = wire.Login(conn, o, c.cfg.ConnectTimeout, readBufferSize)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil && code == 0 {
			err = ctx.Err()
		}
		return nil, nil, code, err
	}
	return conn, r, 0, nil
}

// run serves conn (when not nil), then connects again after every loss,
// with backoff and jitter, until the client closes.
func (c *Client) run(conn net.Conn, r *bufio.Reader) {
	defer c.wg.Done()
	bo := c.backoff()
	failed := 0 // attempts failed in a row
	first := conn == nil
	for {
		if conn == nil {
			// The first attempt after a loss comes at once but for a
			// jitter, so that a fleet that lost its hub at once does not
			// return at once; failures wait 1 s doubling to
			// MaxReconnectInterval (core/backoff's jitter).
			d := rand.N(500 * time.Millisecond)
			if first || failed > 0 {
				d = bo.Delay(failed)
			}
			if !c.sleep(d) {
				return
			}
			var err error
			conn, r, _, err = c.dial(c.ctx)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				failed++
				c.log.Warn().Err(err).Int("attempt", failed+1).Dur("next_in", bo.Base(failed)).Str("broker", c.url.Redacted()).
					Msg("mqtt: cannot connect to the broker")
				continue
			}
		}
		failed, first = 0, false
		c.serve(conn, r)
		conn = nil
		if c.ctx.Err() != nil {
			return
		}
	}
}

// serve runs one connection: it reads it until it fails (the subscription
// and the online status go on a goroutine of their own, for they wait on
// answers only this one reads), then fails what waited on it.
func (c *Client) serve(conn net.Conn, r *bufio.Reader) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.Close()
		return
	}
	c.nc = conn
	c.gen++
	gen := c.gen
	c.resend = true
	c.mu.Unlock()
	c.log.Info().Str("broker", c.url.Redacted()).Str("client_id", ClientID(c.cfg.Device, c.cfg.Agent)).
		Uint64("connection", gen).Msgf("mqtt: connected to %s", c.url.Redacted())
	c.nudge()
	c.lastIn.Store(time.Now().UnixNano())
	pingDone := make(chan struct{})
	c.wg.Add(2)
	go c.ping(conn, pingDone)
	go c.onConnect(gen)
	err := c.read(r, gen)
	close(pingDone)
	conn.Close()

	c.mu.Lock()
	c.nc = nil
	var failed []*op
	for id, ref := range c.ops {
		if ref.o != nil {
			failed = append(failed, ref.o)
			delete(c.ops, id) // a result keeps its id, for its PUBACK after the resend
		}
	}
	c.mu.Unlock()
	for _, o := range failed {
		o.Finish(errNotConnected)
	}
	if c.ctx.Err() == nil {
		c.log.Warn().Err(err).Str("broker", c.url.Redacted()).
			Msg("mqtt: connection to the broker lost; reconnecting (results are kept until delivered)")
	}
}

// read handles the broker's packets, in order, until the connection
// fails.
func (c *Client) read(r *bufio.Reader, gen uint64) error {
	var buf []byte
	for {
		typ, flags, body, err := wire.ReadPacket(r, buf, wire.MaxLength)
		if err != nil {
			return err
		}
		c.lastIn.Store(time.Now().UnixNano())
		if cap(body) <= readBufferSize {
			buf = body[:0]
		}
		switch typ {
		case wire.Publish:
			p, err := wire.DecodePublish(flags, body)
			if err != nil {
				return err
			}
			if p.QoS == 2 {
				// Every subscription of the client is QoS 1: a broker
				// sends nothing at QoS 2. The claims' connection does the
				// same (transport/fleet).
				c.log.Error().Str("topic", p.Topic).Msg("mqtt: a PUBLISH of QoS 2 from the broker, on subscriptions of QoS 1; dropping the connection")
				return errors.New("a PUBLISH of QoS 2 from the broker, on subscriptions of QoS 1")
			}
			c.route(&inMsg{c: c, topic: p.Topic, payload: bytes.Clone(p.Payload), id: p.ID, qos: p.QoS, retained: p.Retained, gen: gen})
		case wire.Puback, wire.Suback, wire.Unsuback:
			if len(body) < 2 {
				return fmt.Errorf("malformed packet of type %d from the broker", typ)
			}
			c.acked(typ, binary.BigEndian.Uint16(body), body[2:])
		case wire.Pingresp:
		default:
			return fmt.Errorf("unexpected packet of type %d from the broker", typ)
		}
	}
}

// route hands a message to its handler, on the reader's goroutine.
func (c *Client) route(m *inMsg) {
	if m.topic == c.topics.Tasks || !c.cfg.NoFleet && m.topic == c.topics.Fleet {
		c.onTask(m)
		return
	}
	c.onOther(m)
}

// acked settles the acknowledgement of packet id: a result's PUBACK
// confirms it, and every result before it acknowledged too, to the
// runtime, in order.
func (c *Client) acked(typ byte, id uint16, rest []byte) {
	c.mu.Lock()
	ref, ok := c.ops[id]
	if !ok {
		c.mu.Unlock()
		return // a second PUBACK of a result published twice
	}
	delete(c.ops, id)
	if p := ref.p; p != nil {
		p.acked = true
		n := 0
		for n < c.sent && c.flight[n].acked {
			c.rt.Confirm(c.flight[n].seq)
			c.flight[n] = nil
			n++
		}
		if n > 0 {
			c.flight = c.flight[n:]
			c.sent -= n
			c.published.Add(uint64(n))
			c.waitingN.Add(-int64(n))
		}
		more := len(c.flight) > c.sent && c.sent < publishWindow
		c.mu.Unlock()
		if more && n > 0 {
			c.nudge() // the window had room for results waiting
		}
		return
	}
	c.mu.Unlock()
	if typ == wire.Suback {
		ref.o.Codes = append([]byte(nil), rest...)
	}
	ref.o.Finish(nil)
}

// newID returns a packet id no operation waits on; c.mu is held.
func (c *Client) newID() uint16 {
	for {
		c.nextID++
		if _, used := c.ops[c.nextID]; c.nextID != 0 && !used {
			return c.nextID
		}
	}
}

// send registers o under a new packet id, encodes its packet with enc and
// writes it; o fails at once while there is no connection.
func (c *Client) send(o *op, enc func(id uint16) []byte) *op {
	c.mu.Lock()
	nc := c.nc
	if nc == nil {
		c.mu.Unlock()
		return o.Finish(errNotConnected)
	}
	if len(c.ops) >= maxOps {
		c.mu.Unlock()
		return o.Finish(errors.New("too many packets waiting for the broker's acknowledgement"))
	}
	id := c.newID()
	c.ops[id] = opRef{o: o}
	c.mu.Unlock()
	c.writeOn(nc, enc(id)) // on failure the reader fails, and fails o
	return o
}

// publish publishes payload on topic at QoS 1.
func (c *Client) publish(topic string, retain bool, payload []byte) *op {
	return c.send(wire.NewOp(), func(id uint16) []byte { return wire.EncodePublish(topic, payload, id, retain) })
}

// subscribeTo subscribes to filters (topic → QoS) in one SUBSCRIBE.
func (c *Client) subscribeTo(filters map[string]byte) *op {
	o := wire.NewOp()
	qos := make([]byte, 0, len(filters))
	for f, q := range filters {
		o.Filters = append(o.Filters, f)
		qos = append(qos, q)
	}
	return c.send(o, func(id uint16) []byte { return wire.EncodeSubscribe(id, o.Filters, qos) })
}

// unsubscribe ends the subscription to topic.
func (c *Client) unsubscribe(topic string) *op {
	return c.send(wire.NewOp(), func(id uint16) []byte { return wire.EncodeUnsubscribe(id, []string{topic}) })
}

// writeOn writes b on nc, whole, within wire.WriteTimeout; on failure it closes
// nc (its reader then fails, and the connection is made again).
func (c *Client) writeOn(nc net.Conn, b []byte) bool { return wire.Write(&c.wmu, nc, b) }

// ping sends PINGREQ every keep-alive interval until done, and closes the
// connection when nothing came from the broker for the interval and
// pingTimeout (a PINGRESP comes within one), unless the reader is waiting
// for room (backpressure): then the broker's packets wait in the socket.
func (c *Client) ping(conn net.Conn, done chan struct{}) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if !c.blocked.Load() && time.Since(time.Unix(0, c.lastIn.Load())) > c.cfg.KeepAlive+pingTimeout {
				c.log.Warn().Msg("mqtt: no answer from the broker within the keep-alive; connecting again")
				conn.Close()
				return
			}
			if !c.writeOn(conn, wire.PingreqPacket) {
				return
			}
		}
	}
}

// onConnect subscribes to the task topics and publishes the online status
// on connection gen.
func (c *Client) onConnect(gen uint64) {
	defer c.wg.Done()
	subs := map[string]byte{c.topics.Tasks: 1}
	if !c.cfg.NoFleet {
		subs[c.topics.FleetShared] = 1
	}
	retry := c.subscribe(subs, 0)
	c.subOnce.Do(func() { close(c.subscribed) })
	if !c.cfg.NoDeviceStatus {
		if err := c.publish(c.topics.Status, true, c.status("online", "")).Wait(c.ctx, c.cfg.PublishTimeout); err != nil {
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
		retry = c.subscribe(retry, n+1)
	}
}

// subscribe asks for subs and returns what was refused or not answered.
// Retries (retry > 0) log at warn level.
func (c *Client) subscribe(subs map[string]byte, retry int) map[string]byte {
	o := c.subscribeTo(subs)
	if err := o.Wait(c.ctx, c.cfg.ConnectTimeout); err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn().Err(err).Int("retry", retry).Msg("mqtt: subscribing failed; asking again")
		}
		return subs
	}
	var refused map[string]byte
	for i, topic := range o.Filters {
		if i < len(o.Codes) && o.Codes[i] <= 2 {
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
