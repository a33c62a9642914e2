package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"
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

// Opener returns paho's CustomOpenConnectionFn for a client of the project:
// a TCP or TLS connection (tc nil or not) with a read buffer, dialled as
// paho's own opener dials the schemes ParseBrokerURL accepts: through the
// proxy that ALL_PROXY names (NO_PROXY excepted), and within the connect
// timeout. Every paho client the project makes (an agent's, the daemon's,
// the CLI's, the fleet's claims) opens its connection through it.
func Opener(tc *tls.Config) paho.OpenConnectionFunc {
	return func(u *url.URL, o paho.ClientOptions) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), o.ConnectTimeout)
		defer cancel()
		d := proxy.FromEnvironmentUsing(&net.Dialer{Timeout: o.ConnectTimeout})
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
		return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBufferSize)}, nil
	}
}
