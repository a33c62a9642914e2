package fleet

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// hubConn is the claims' own connection to the hub: an MQTT 3.1.1 client
// with a clean session that does what the claims need and nothing else
// (QoS 1 publications, subscriptions and unsubscriptions, keep-alive,
// reconnection), written for them because of where paho's time went.
//
// Why not paho, measured: paho hands every packet through four or five
// goroutines (its reader, its incoming comms, its router, the ack's
// outbound relay, its writer), and a claim is four packets on the device
// (the claim and its PUBACK, the echo and its PUBACK), so a fleet task's
// claim cost the device more processor time in goroutine wake-ups than in
// anything it did (go test -bench 'BenchmarkClaimSparse|BenchmarkClaimStream'
// ./transport/fleet/; docs/fleet.md has the figures). Here one goroutine
// reads the connection (through a buffer) and hands each message to the
// handler itself, in the order they came, and a packet is written by
// whoever sends it, at once: no goroutine of the client's own wakes for a
// packet.
//
// Order: the handler sees the messages in the order the hub sent them, and
// a SUBACK is handled only after the messages read before it (the barrier
// of Claims still waits for its own message: a hub may queue a
// subscription's retained messages after its SUBACK).
type hubConn struct {
	hubConfig

	wmu sync.Mutex // one packet written at a time, whole

	mu      sync.Mutex
	room    sync.Cond         // signalled when an operation ended (a packet id is free again)
	conn    net.Conn          // nil while not connected
	ops     map[uint16]*hubOp // packet id → what waits for its acknowledgement
	nextID  uint16
	held    []heldPub    // publications made while not connected, sent at the next connection
	lastIn  atomic.Int64 // when the last packet came from the hub (unix nanoseconds)
	started bool
	closing bool
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when run returned
}

// newHubConn returns a hubConn that is not connected yet (start).
func newHubConn(cfg hubConfig) *hubConn {
	c := &hubConn{hubConfig: cfg}
	c.room.L = &c.mu
	c.ops = map[uint16]*hubOp{}
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	return c
}

// hubConfig is what a hubConn connects with, and whom it tells.
type hubConfig struct {
	url       *url.URL
	tc        *tls.Config
	clientID  string
	user      string
	pass      string
	keepAlive time.Duration
	handler   func(topic string, payload []byte, retained bool)
	onUp      func()
	onDown    func(error)
	log       zerolog.Logger
}

// hubOp is one publication, subscription or unsubscription on its way
// (wire.Op).
type hubOp = wire.Op

// heldPub is a publication kept for the next connection.
type heldPub struct {
	topic   string
	payload []byte
	retain  bool
}

// errNotConnected fails what is asked of a hubConn while it is not
// connected, and what was on its way when the connection was lost.
var errNotConnected = errors.New("not connected to the broker")

// maxHeld bounds the publications kept while not connected (done claims,
// clearings): beyond, the oldest are dropped (their claims then hold as
// they were retained: a running one expires after the run TTL).
const maxHeld = 100_000

// connectTimeout bounds the dial, the TLS handshake and the CONNACK.
const connectTimeout = 10 * time.Second

// reconnect backoff: 1 s doubling to 30 s.
const (
	reconnectMin = time.Second
	reconnectMax = 30 * time.Second
)

// start connects in the background, again after every loss, until Close.
func (h *hubConn) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closing {
		return
	}
	h.started = true
	go h.run()
}

// run connects, reads until the connection is lost, and connects again.
func (h *hubConn) run() {
	defer close(h.done)
	wait := reconnectMin
	failing, lost := false, false
	for {
		conn, r, err := h.connect()
		if err != nil {
			if !failing {
				h.log.Warn().Err(err).Str("broker", h.url.Redacted()).Msg("fleet: the claims' connection to the broker failed; connecting again")
				failing = true
			}
			select {
			case <-h.stop:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, reconnectMax)
			continue
		}
		failing, wait = false, reconnectMin
		h.mu.Lock()
		if h.closing {
			h.mu.Unlock()
			conn.Close()
			return
		}
		h.conn = conn
		held := h.held
		h.held = nil
		h.mu.Unlock()
		if lost {
			h.log.Info().Int("held", len(held)).Msg("fleet: the claims' connection to the broker is back")
		}
		if len(held) > 0 {
			// Off this goroutine, which reads the acknowledgements that
			// make room for them.
			go func() {
				for _, p := range held {
					h.Publish(p.topic, p.retain, true, p.payload)
				}
			}()
		}
		if h.onUp != nil {
			h.onUp()
		}
		h.lastIn.Store(time.Now().UnixNano())
		pingDone := make(chan struct{})
		go h.ping(conn, pingDone)
		err = h.read(r)
		close(pingDone)
		h.mu.Lock()
		h.conn = nil
		ops := h.ops
		h.ops = map[uint16]*hubOp{}
		closing := h.closing
		h.room.Broadcast()
		h.mu.Unlock()
		conn.Close()
		for _, o := range ops {
			o.Finish(errNotConnected)
		}
		if closing {
			return
		}
		lost = true
		h.log.Warn().Err(err).Msg("fleet: the claims' connection to the broker was lost; connecting again")
		if h.onDown != nil {
			h.onDown(err)
		}
		select {
		case <-h.stop:
			return
		case <-time.After(reconnectMin):
		}
	}
}

// connect dials the hub (mqtt.DialBroker: TCP or TLS, through the proxy
// of the environment) and sends CONNECT.
func (h *hubConn) connect() (net.Conn, io.Reader, error) {
	conn, err := mqtt.DialBroker(h.url, h.tc, connectTimeout)
	if err != nil {
		return nil, nil, err
	}
	r, _, err := wire.Login(conn, wire.ConnectOptions{ClientID: h.clientID, User: h.user, Pass: h.pass,
		KeepAlive: h.keepAlive, CleanSession: true}, connectTimeout, readBuffer)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, r, nil
}

// readBuffer is the claims' read buffer: a batch's retained claims and
// echoes come in a few reads.
const readBuffer = 16 << 10

// writeTo writes one packet on conn, whole; on failure it closes conn (its
// reader then fails, and the connection is made again).
func (h *hubConn) writeTo(conn net.Conn, pk []byte) bool { return wire.Write(&h.wmu, conn, pk) }

// ping sends PINGREQ every keep-alive interval until done, and closes the
// connection when nothing came from the hub for one and a half intervals
// (a PINGRESP comes within one).
func (h *hubConn) ping(conn net.Conn, done chan struct{}) {
	t := time.NewTicker(h.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if time.Since(time.Unix(0, h.lastIn.Load())) > h.keepAlive+h.keepAlive/2 {
				h.log.Warn().Msg("fleet: no answer from the broker within the keep-alive; connecting again")
				conn.Close()
				return
			}
			if !h.writeTo(conn, wire.PingreqPacket) {
				return
			}
		}
	}
}

// read handles the hub's packets, in order, until the connection fails.
func (h *hubConn) read(r io.Reader) error {
	var buf []byte
	for {
		typ, flags, body, err := wire.ReadPacket(r, buf, maxPacket)
		if err != nil {
			return err
		}
		h.lastIn.Store(time.Now().UnixNano())
		buf = body[:0]
		switch typ {
		case wire.Publish:
			p, err := wire.DecodePublish(flags, body)
			if err != nil {
				return err
			}
			if p.QoS == 2 {
				return errors.New("fleet: a PUBLISH of QoS 2 from the broker, on subscriptions of QoS 1")
			}
			if !p.Truncated && h.handler != nil {
				h.handler(p.Topic, p.Payload, p.Retained)
			}
			if p.QoS > 0 {
				h.write(wire.AppendPuback(nil, p.ID))
			}
		case wire.Puback, wire.Suback, wire.Unsuback:
			if len(body) < 2 {
				return fmt.Errorf("fleet: malformed packet of type %d from the broker", typ)
			}
			id := binary.BigEndian.Uint16(body)
			h.mu.Lock()
			o := h.ops[id]
			delete(h.ops, id)
			h.room.Signal()
			h.mu.Unlock()
			if o != nil {
				if typ == wire.Suback {
					o.Codes = append([]byte(nil), body[2:]...)
				}
				o.Finish(nil)
			}
		case wire.Pingresp:
		default:
			return fmt.Errorf("fleet: unexpected packet of type %d from the broker", typ)
		}
	}
}

// write writes one packet on the current connection; false when there is
// none, or the write failed (the reader then sees the connection fail).
func (h *hubConn) write(pk []byte) bool {
	h.mu.Lock()
	conn := h.conn
	h.mu.Unlock()
	if conn == nil {
		return false
	}
	return h.writeTo(conn, pk)
}

// maxInFlight bounds the operations waiting for their acknowledgement (the
// packet ids in use).
const maxInFlight = 60_000

// send registers o under a new packet id, encodes its packet with enc and
// writes it. When not connected, o fails at once (and hold, when set, is
// kept for the next connection). With maxInFlight operations on their way,
// a held publication (made off the reading goroutine: done claims,
// clearings) waits for room; any other fails (the reader itself may be the
// caller, and only it frees room).
func (h *hubConn) send(o *hubOp, hold *heldPub, enc func(id uint16) []byte) *hubOp {
	h.mu.Lock()
	for hold != nil && h.conn != nil && !h.closing && len(h.ops) >= maxInFlight {
		h.room.Wait()
	}
	if h.conn != nil && len(h.ops) >= maxInFlight {
		h.mu.Unlock()
		return o.Finish(errors.New("too many publications waiting for the broker's acknowledgement"))
	}
	if h.conn == nil || h.closing {
		if hold != nil && !h.closing {
			if len(h.held) >= maxHeld {
				h.held = h.held[1:]
			}
			h.held = append(h.held, *hold)
		}
		h.mu.Unlock()
		return o.Finish(errNotConnected)
	}
	for {
		h.nextID++
		if h.nextID != 0 && h.ops[h.nextID] == nil {
			break
		}
	}
	id := h.nextID
	h.ops[id] = o
	conn := h.conn
	h.mu.Unlock()
	h.writeTo(conn, enc(id)) // on failure the reader fails, and fails o
	return o
}

// Publish publishes payload on topic, QoS 1 (retained when retain). A
// publication made while not connected fails at once; with hold it is also
// kept, and published once connected again (nothing waits for it then).
func (h *hubConn) Publish(topic string, retain, hold bool, payload []byte) *hubOp {
	var held *heldPub
	if hold {
		held = &heldPub{topic: topic, payload: payload, retain: retain}
	}
	return h.send(wire.NewOp(), held, func(id uint16) []byte {
		return wire.EncodePublish(topic, payload, id, retain)
	})
}

// Subscribe subscribes to filters (topic → QoS) in one SUBSCRIBE.
func (h *hubConn) Subscribe(filters map[string]byte) *hubOp {
	o := wire.NewOp()
	qos := make([]byte, 0, len(filters))
	for f, q := range filters {
		o.Filters = append(o.Filters, f)
		qos = append(qos, q)
	}
	return h.send(o, nil, func(id uint16) []byte { return wire.EncodeSubscribe(id, o.Filters, qos) })
}

// Unsubscribe ends the subscriptions to topics in one UNSUBSCRIBE.
func (h *hubConn) Unsubscribe(topics ...string) *hubOp {
	return h.send(wire.NewOp(), nil, func(id uint16) []byte { return wire.EncodeUnsubscribe(id, topics) })
}

// Close sends DISCONNECT after what was written before it, and stops.
func (h *hubConn) Close() {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return
	}
	h.closing = true
	conn, started := h.conn, h.started
	close(h.stop)
	h.room.Broadcast()
	h.mu.Unlock()
	if conn != nil {
		h.writeTo(conn, wire.DisconnectPacket)
		conn.Close()
	}
	if started {
		<-h.done
	}
}

// maxPacket bounds the packets the claims read whole. The hub sends them
// claims (about 200 bytes) and acknowledgements; a larger publication (a
// device user's junk retained on a claim topic) is read up to maxPacket,
// acknowledged and not handed on: no claim is that long.
const maxPacket = 64 << 10
