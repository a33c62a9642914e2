package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"
)

// readBufferSize is the read buffer in front of a broker connection: it
// holds a few dozen 1 KiB tasks, so a busy stream costs one read(2) per
// buffer instead of several per packet.
const readBufferSize = 32 << 10

// bufferedConn is a net.Conn whose reads go through a buffer and whose
// writes are coalesced. paho reads a packet's fixed header and its remaining
// length one byte at a time, and each of those is a read(2) on a bare
// socket; behind the buffer a stream of tasks costs a few system calls per
// many packets.
//
// paho writes each packet with a write(2) of its own from its one writer
// goroutine: under load, an agent answering a burst of tasks wrote a
// PUBACK and a result at a time, and the broker woke to read each. Write
// now appends the packet to a pending buffer and returns; a flusher
// goroutine, started when there is something to write and gone when all is
// written, writes what has gathered in one call, so the packets paho hands
// over while a write is under way go out together. The order of the bytes
// is paho's. A write error is returned by every later Write (paho then
// drops the connection, and its QoS 1 flows resend what was not
// acknowledged); Close writes what is pending first, within closeFlush.
// paho's write timeout (SetWriteDeadline before each packet) bounds each
// of the flusher's writes instead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader

	mu       sync.Mutex
	cond     sync.Cond     // signalled when the flusher wrote or stopped
	pending  []byte        // handed over by Write, not yet written
	spare    []byte        // the buffer of the last write, for reuse
	flushing bool          // a flusher goroutine runs
	err      error         // the first write error
	timeout  time.Duration // paho's write timeout (0: none)
}

// maxPending is how much Write lets gather before it waits for the
// flusher.
const maxPending = 256 << 10

// maxSpare is the largest write buffer kept for the next write: an idle
// connection keeps no more after a burst.
const maxSpare = 16 << 10

// closeFlush bounds how long Close waits for the pending bytes (paho's
// DISCONNECT among them) to be written.
const closeFlush = 2 * time.Second

func newBufferedConn(conn net.Conn) *bufferedConn {
	c := &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBufferSize)}
	c.cond.L = &c.mu
	return c
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write hands p to the flusher.
func (c *bufferedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && len(c.pending) >= maxPending {
		c.cond.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	c.pending = append(c.pending, p...)
	if !c.flushing {
		c.flushing = true
		go c.flush()
	}
	return len(p), nil
}

// flush writes what is pending until nothing is.
func (c *bufferedConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 && c.err == nil {
		buf, timeout := c.pending, c.timeout
		c.pending, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		var err error
		if timeout > 0 {
			err = c.Conn.SetWriteDeadline(time.Now().Add(timeout))
		}
		if err == nil {
			_, err = c.Conn.Write(buf)
		}
		if err == nil && timeout > 0 {
			err = c.Conn.SetWriteDeadline(time.Time{})
		}
		c.mu.Lock()
		if err != nil && c.err == nil {
			c.err = err
		}
		if cap(buf) <= maxSpare {
			c.spare = buf[:0]
		}
		c.cond.Broadcast()
	}
	c.flushing = false
	c.cond.Broadcast()
}

// SetWriteDeadline takes paho's write timeout: paho sets a deadline before
// each packet it writes and clears it after, and the flusher sets its own
// from the same timeout before each of its writes.
func (c *bufferedConn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() {
		c.mu.Lock()
		c.timeout = max(time.Until(t), time.Millisecond)
		c.mu.Unlock()
	}
	return nil
}

// Close writes what is pending, waiting at most closeFlush, and closes
// the connection.
func (c *bufferedConn) Close() error {
	c.mu.Lock()
	if c.flushing {
		c.timeout = closeFlush // the flusher's next writes
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlush))
		for c.flushing {
			c.cond.Wait()
		}
	}
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// Opener returns paho's CustomOpenConnectionFn for a client of the project:
// a connection made by DialBroker, with a read buffer and coalesced writes
// (bufferedConn). Every paho client the project makes (an agent's, the
// daemon's, the CLI's) opens its connection through it.
func Opener(tc *tls.Config) paho.OpenConnectionFunc {
	return func(u *url.URL, o paho.ClientOptions) (net.Conn, error) {
		conn, err := DialBroker(u, tc, o.ConnectTimeout)
		if err != nil {
			return nil, err
		}
		return newBufferedConn(conn), nil
	}
}

// DialBroker connects to the broker at u (a URL ParseBrokerURL accepted) as
// paho's own opener dials it: TCP, then TLS when tc is set, through the
// proxy that ALL_PROXY names (NO_PROXY excepted), all within timeout. An
// agent's Client and the fleet's claims, which are no paho clients, dial
// with it too.
func DialBroker(u *url.URL, tc *tls.Config, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := proxy.FromEnvironmentUsing(&net.Dialer{Timeout: timeout})
	var conn net.Conn
	var err error
	if cd, ok := d.(proxy.ContextDialer); ok {
		conn, err = cd.DialContext(ctx, "tcp", u.Host)
	} else {
		conn, err = d.Dial("tcp", u.Host)
	}
	if err != nil {
		return nil, err
	}
	if tc != nil {
		cfg := tc
		if cfg.ServerName == "" {
			cfg = tc.Clone()
			cfg.ServerName = u.Hostname()
		}
		tlsConn := tls.Client(conn, cfg)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tlsConn
	}
	return conn, nil
}
