package broker

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"
)

// The broker's bounds, so that no client, authenticated or not, makes it
// hold more than a known amount (issue #28): a packet larger than
// MaxPacketBytes is refused while its length is read, before its body is
// (mochi's MaximumPacketSize); a CONNECT, read before anyone is
// authenticated, may not exceed MaxConnectBytes; a connection that has not
// sent its CONNECT within ConnectTimeout is closed; beyond MaxConnections
// open connections a new one is closed at once; and the retained messages
// (topic and payload) hold at most MaxRetainedBytes. An eighth of the
// connections is kept for loopback clients (the device's own processes).
const (
	// DefaultMaxPacketBytes bounds one MQTT packet: four times the
	// default largest task (limits.max_task_bytes, 256 KiB).
	DefaultMaxPacketBytes = 1 << 20
	// MaxConnectBytes bounds a CONNECT (client id, user name, password,
	// will), or MaxPacketBytes when that is smaller.
	MaxConnectBytes = 64 << 10
	// DefaultConnectTimeout is how long a connection may take to send
	// its CONNECT.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMaxConnections bounds the open connections (with or
	// without their CONNECT).
	DefaultMaxConnections = 256
	// DefaultMaxRetainedBytes bounds the retained messages, topics and
	// payloads together.
	DefaultMaxRetainedBytes = 64 << 20
	// MaxPacketLimit is the largest packet MQTT can express (its
	// remaining length's maximum, plus the fixed header).
	MaxPacketLimit = 268435455 + 5
)

// boundListener closes a connection beyond maxConns at once, and one that
// has not sent its CONNECT within timeout.
type boundListener struct {
	net.Listener
	maxConns int64
	timeout  time.Duration
	log      zerolog.Logger

	open    atomic.Int64
	refused atomic.Int64 // since the last log line about it
	logged  atomic.Int64 // unix nanoseconds of that line

	// unread counts the accepted connections mochi has not read from yet
	// (see drain); conns holds the open ones. A counter under mu, not a
	// WaitGroup: an Accept that was under way when the listener closed
	// adds to it while drain waits, which a WaitGroup forbids (Add from
	// zero concurrent with Wait: a data race under -race).
	mu       sync.Mutex // guards unread, conns and draining
	unread   int
	conns    map[*boundConn]struct{}
	draining bool // drain has begun: an Accept that finishes now hands nothing to mochi
}

func (l *boundListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			// mochi's accept loop ends at the first error, which would
			// leave the broker deaf for good after, say, EMFILE (too many
			// open files): wait and accept again, as net/http does.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			l.log.Warn().Err(err).Msgf("embedded broker: accept failed; retrying in %s", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		if limit := l.limit(c.RemoteAddr()); l.open.Add(1) > limit {
			l.open.Add(-1)
			_ = c.Close()
			l.refuse(c.RemoteAddr(), limit)
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(l.timeout))
		bc := &boundConn{Conn: c, l: l}
		l.mu.Lock()
		if l.draining {
			// Accepted as the listener closed, after drain looked at the
			// connections: mochi would wait for it at Close.
			l.mu.Unlock()
			l.open.Add(-1)
			_ = c.Close()
			return nil, net.ErrClosed
		}
		l.unread++
		if l.conns == nil {
			l.conns = map[*boundConn]struct{}{}
		}
		l.conns[bc] = struct{}{}
		l.mu.Unlock()
		return bc, nil
	}
}

// drain, once the listener is closed, waits (up to wait) until mochi has
// read from every connection accepted (its goroutine has then registered
// the client in the listeners' WaitGroup, which Server.Close waits on:
// registering it during that wait is a data race mochi v2.7.9 has), then
// closes the connections that have not sent their CONNECT, which mochi's
// Close would otherwise wait for until their deadline.
func (l *boundListener) drain(wait time.Duration) {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
	for deadline := time.Now().Add(wait); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		n := l.unread
		l.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
	}
	l.mu.Lock()
	var waiting []*boundConn
	for c := range l.conns {
		if !c.connected.Load() {
			waiting = append(waiting, c)
		}
	}
	l.mu.Unlock()
	for _, c := range waiting {
		_ = c.Close()
	}
}

// limit is the open connections beyond which one from remote is refused:
// maxConns for the device's own processes (loopback), an eighth less (at
// least one) for the network, so that a flood from the network leaves the
// device's agents room to connect.
func (l *boundListener) limit(remote net.Addr) int64 {
	if a, ok := remote.(*net.TCPAddr); ok && a.IP.IsLoopback() || l.maxConns < 2 {
		return l.maxConns
	}
	return l.maxConns - max(1, l.maxConns/8)
}

// refuse logs a refused connection, at most one line a second (with the
// count of those refused since the previous line), so that a flood does
// not flood the log too.
func (l *boundListener) refuse(remote net.Addr, limit int64) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.logged.Load()
	if now-last < int64(time.Second) || !l.logged.CompareAndSwap(last, now) {
		return
	}
	l.refused.Add(-n)
	l.log.Warn().Str("remote", remote.String()).Int64("open", l.open.Load()).Int64("refused", n).
		Msgf("embedded broker: connection refused: %d connections are open, the maximum for this client (mqtt.broker_max_connections is %d; an eighth of it is kept for loopback clients)", limit, l.maxConns)
}

// readFrom counts a connection mochi has read from (or that closed first).
func (l *boundListener) readFrom() {
	l.mu.Lock()
	l.unread--
	l.mu.Unlock()
}

// boundConn is an accepted connection under its CONNECT deadline until
// mochi sets its own deadline (the keepalive's) once the client is
// connected.
type boundConn struct {
	net.Conn
	l         *boundListener
	connected atomic.Bool
	read      sync.Once // unread less one, at the first Read or at Close
	closed    sync.Once
}

func (c *boundConn) Read(p []byte) (int, error) {
	c.read.Do(c.l.readFrom)
	n, err := c.Conn.Read(p)
	if err != nil && !c.connected.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		c.l.log.Warn().Str("remote", c.RemoteAddr().String()).
			Msgf("embedded broker: connection closed: no CONNECT within %s (mqtt.broker_connect_timeout)", c.l.timeout)
	}
	return n, err
}

func (c *boundConn) SetDeadline(t time.Time) error {
	c.connected.Store(true)
	return c.Conn.SetDeadline(t)
}

func (c *boundConn) Close() error {
	c.read.Do(c.l.readFrom)
	c.closed.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// limitsHook keeps the retained messages within maxRetained bytes and logs
// the clients disconnected for a packet too large.
type limitsHook struct {
	mqtt.HookBase
	srv         *mqtt.Server
	log         zerolog.Logger
	maxRetained int64
	maxPacket   int

	mu       sync.Mutex
	counted  time.Time        // when retained was last counted from the broker's
	retained map[string]int64 // bytes (topic and payload) by topic
	total    int64
}

func newLimitsHook(srv *mqtt.Server, log zerolog.Logger, maxRetained int64, maxPacket int) *limitsHook {
	return &limitsHook{srv: srv, log: log, maxRetained: maxRetained, maxPacket: maxPacket, retained: map[string]int64{}}
}

func (h *limitsHook) ID() string { return "openstarry-limits" }

func (h *limitsHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnPublish, mqtt.OnDisconnect}, []byte{b})
}

// OnPublish refuses a retained message that would take the retained
// messages beyond maxRetained bytes: an MQTT 5 QoS 1 publisher gets PUBACK
// 0x97 (quota exceeded); any other is acknowledged as MQTT 3.1.1 allows no
// other answer, and the message is dropped (neither retained nor
// delivered), with a log line either way. Replacing a retained message
// with one no larger, and clearing one, always succeed.
func (h *limitsHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !pk.FixedHeader.Retain || strings.HasPrefix(pk.TopicName, "$") {
		return pk, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counted.IsZero() {
		// The stored retained messages are loaded before the listener
		// serves, so the first retained publish finds them all.
		h.count()
	}
	if len(pk.Payload) == 0 {
		h.total -= h.retained[pk.TopicName]
		delete(h.retained, pk.TopicName)
		return pk, nil
	}
	size := int64(len(pk.TopicName) + len(pk.Payload))
	over := func() bool { return h.total-h.retained[pk.TopicName]+size > h.maxRetained }
	if over() && time.Since(h.counted) > time.Second {
		// Count again before refusing (at most once a second): a retained
		// message with a message expiry interval leaves the broker
		// without a publish this hook sees.
		h.count()
	}
	if over() {
		h.log.Warn().Str("client", cl.ID).Str("topic", pk.TopicName).Int64("bytes", size).Int64("retained_bytes", h.total).
			Msgf("embedded broker: retained message refused: the retained messages would exceed %d bytes (mqtt.broker_max_retained_bytes)", h.maxRetained)
		if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos == 1 {
			return pk, packets.ErrQuotaExceeded
		}
		return pk, packets.CodeSuccessIgnore
	}
	h.total += size - h.retained[pk.TopicName]
	h.retained[pk.TopicName] = size
	return pk, nil
}

// count sets retained and total from the broker's retained messages.
func (h *limitsHook) count() {
	clear(h.retained)
	h.total = 0
	for topic, m := range h.srv.Topics.Retained.GetAll() {
		if !strings.HasPrefix(topic, "$") {
			h.retained[topic] = int64(len(topic) + len(m.Payload))
			h.total += h.retained[topic]
		}
	}
	h.counted = time.Now()
}

// OnDisconnect logs a client disconnected for a packet larger than
// maxPacket (mochi refused it while reading its length).
func (h *limitsHook) OnDisconnect(cl *mqtt.Client, err error, _ bool) {
	if errors.Is(err, packets.ErrPacketTooLarge) {
		h.log.Warn().Str("client", cl.ID).Str("remote", cl.Net.Remote).Err(err).
			Msgf("embedded broker: client disconnected: it sent a packet larger than %d bytes (mqtt.broker_max_packet_bytes)", h.maxPacket)
	}
}
