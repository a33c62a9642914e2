package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// readBufferSize is the read buffer in front of a broker connection: it
// holds a few dozen 1 KiB tasks, so a busy stream costs one read(2) per
// buffer instead of several per packet.
const readBufferSize = 32 << 10

// bufferedConn is a net.Conn whose reads go through a buffer. paho reads a
// packet's fixed header and its remaining length one byte at a time, and
// each of those is a read(2) on a bare socket; behind the buffer a stream
// of tasks costs a few system calls per many packets. Writes are not
// buffered: paho writes each packet whole, and must see its write errors.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// opener returns paho's CustomOpenConnectionFn for this client: a TCP or
// TLS connection (tc nil or not), bounded by the connect timeout, with a
// read buffer. It does what paho's own opener does for the schemes
// ParseBrokerURL accepts, proxies aside (a device reaches its hub
// directly).
func opener(tc *tls.Config) paho.OpenConnectionFunc {
	return func(u *url.URL, o paho.ClientOptions) (net.Conn, error) {
		d := &net.Dialer{Timeout: o.ConnectTimeout}
		var conn net.Conn
		var err error
		if tc != nil {
			td := &tls.Dialer{NetDialer: d, Config: tc}
			conn, err = td.DialContext(context.Background(), "tcp", u.Host)
		} else {
			conn, err = d.Dial("tcp", u.Host)
		}
		if err != nil {
			return nil, err
		}
		return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBufferSize)}, nil
	}
}
