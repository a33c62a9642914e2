// Package connpass hands the daemon's client connections to its agents: the
// daemon's side of an HTTP request for /agents/{id}/... takes the client's
// socket out of its server, and sends it, with every byte it had read of
// it, to the agent process over a unix socket pair made at spawn
// (SCM_RIGHTS); the agent serves that connection with its own HTTP server
// from then on, so the later requests of a kept-alive connection cost the
// daemon nothing. A request the agent must not answer itself (for another
// agent, for the daemon, one the daemon's rules refuse) goes back to the
// daemon the same way.
//
// It owns the messages on the pair (Message: their encoding is fuzzed), the
// pair itself (Link, Linux only: Supported), the connection that replays the
// bytes read first (Conn), the listener fed by a channel that the receiving
// server accepts from (Listener), taking a connection out of a server with
// what was read of it (Take), and the agent's side (Serve). The daemon's
// side lives in core/daemon (pass.go).
//
// Invariants: exactly one process owns a handed connection at a time; each
// message moves the ownership of at most one socket, and a socket received
// with a message that cannot be used is closed at once. The agent answers a
// request itself only when the daemon would have passed it to it
// unchanged: the daemon's http.hosts and http.token rules hold (Settings),
// and anything the web UI judges (cookies, Origin, Sec-Fetch-*) goes back.
package connpass

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// EnvHandoff names the environment variable that tells an agent the daemon
// hands it connections: the JSON of Settings.
const EnvHandoff = "OPENSTARRY_AGENT_HANDOFF"

// Kind is the kind of a message on the pair.
type Kind byte

// The messages.
const (
	KindReady  Kind = 'R' // agent → daemon: it takes connections
	KindStop   Kind = 'S' // agent → daemon: it stops; send no more
	KindConn   Kind = 'C' // daemon → agent: a connection (with its socket) and the bytes read of it
	KindBack   Kind = 'B' // agent → daemon: a connection handed back (with its socket) and the bytes read of it
	KindClosed Kind = 'X' // agent → daemon: the connection ID is closed
)

// version is the first byte of every message.
const version = 1

// headerLen is the length of a message's header: version, kind, ID.
const headerLen = 1 + 1 + 8

// MaxMessage bounds a message, header included: a connection whose bytes
// read do not fit is not handed on. (A message on the pair is one datagram,
// which must fit the socket's send buffer, 208 KiB by default on Linux.)
const MaxMessage = 160 << 10

// Message is one message on the pair. Conn and Back carry a socket beside
// it (Link.Send, Link.Recv).
type Message struct {
	Kind Kind
	ID   uint64 // the connection's, given by the daemon; 0 for Ready and Stop
	Data []byte // Conn, Back: the bytes read of the connection, to be served first
}

// Errors of Decode, and of Link.Recv.
var (
	// ErrDropped wraps Link.Recv's error for a message it could not use
	// (it closed any socket that came with it): the next may be read.
	ErrDropped = errors.New("connpass: message dropped")

	ErrShort   = errors.New("connpass: message shorter than its header")
	ErrVersion = errors.New("connpass: unknown message version")
	ErrKind    = errors.New("connpass: unknown message kind")
	ErrTooLong = errors.New("connpass: message too long")
)

// carriesSocket reports whether a message of kind k comes with a socket.
func (k Kind) carriesSocket() bool { return k == KindConn || k == KindBack }

// Append appends the encoding of m to b.
func (m Message) Append(b []byte) []byte {
	b = append(b, version, byte(m.Kind))
	b = binary.BigEndian.AppendUint64(b, m.ID)
	return append(b, m.Data...)
}

// Decode decodes one message; Data aliases b.
func Decode(b []byte) (Message, error) {
	if len(b) < headerLen {
		return Message{}, ErrShort
	}
	if len(b) > MaxMessage {
		return Message{}, ErrTooLong
	}
	if b[0] != version {
		return Message{}, fmt.Errorf("%w %d", ErrVersion, b[0])
	}
	m := Message{Kind: Kind(b[1]), ID: binary.BigEndian.Uint64(b[2:headerLen])}
	switch m.Kind {
	case KindReady, KindStop:
		if m.ID != 0 || len(b) > headerLen {
			return Message{}, fmt.Errorf("connpass: %c message with an ID or data", m.Kind)
		}
	case KindClosed:
		if m.ID == 0 || len(b) > headerLen {
			return Message{}, errors.New("connpass: closed message without an ID or with data")
		}
	case KindConn, KindBack:
		if m.ID == 0 || len(b) == headerLen {
			return Message{}, fmt.Errorf("connpass: %c message without an ID or bytes", m.Kind)
		}
		m.Data = b[headerLen:]
	default:
		return Message{}, fmt.Errorf("%w %q", ErrKind, b[1])
	}
	return m, nil
}

// Conn is a handed connection: the client's socket, whose first bytes are
// those read of it before it was handed (the request being answered, and
// any that followed it).
type Conn struct {
	net.Conn        // the client's socket
	ID       uint64 // given by the daemon
	prefix   []byte // served before the socket's

	onClose  func(*Conn) // told once when closed, unless detached
	once     sync.Once
	detached atomic.Bool
	skip     atomic.Bool // the daemon: do not hand its next request on
}

// NewConn returns c with prefix read first; onClose (may be nil) is told
// when it is closed, unless it was handed on (Take) first.
func NewConn(c net.Conn, id uint64, prefix []byte, onClose func(*Conn)) *Conn {
	return &Conn{Conn: c, ID: id, prefix: prefix, onClose: onClose}
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Close closes the socket and tells onClose, unless it was handed on.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	if !c.detached.Load() {
		c.once.Do(func() {
			if c.onClose != nil {
				c.onClose(c)
			}
		})
	}
	return err
}

// CloseWrite shuts the socket's sending side, as net/http does before it
// closes a connection it answered with an error.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SkipNext marks that the next request read on c is not to be handed on
// (the daemon took it back after a failed hand-off).
func (c *Conn) SkipNext() { c.skip.Store(true) }

// Skip reports (once) whether SkipNext was called.
func (c *Conn) Skip() bool { return c.skip.CompareAndSwap(true, false) }

type connKey struct{}

// ConnContext is an http.Server's ConnContext that lets a handler find the
// *Conn its request came on (FromContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, pc)
	}
	return ctx
}

// FromContext returns the *Conn a request came on, or nil.
func FromContext(ctx context.Context) *Conn {
	pc, _ := ctx.Value(connKey{}).(*Conn)
	return pc
}

// Listener is a net.Listener fed by Put: an HTTP server serves handed
// connections from it.
type Listener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

// NewListener returns a Listener whose Addr is addr.
func NewListener(addr net.Addr) *Listener {
	return &Listener{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Put hands c to Accept; false when the listener is closed (c is the
// caller's still).
func (l *Listener) Put(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next connection Put.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept and Put.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the address given to NewListener.
func (l *Listener) Addr() net.Addr { return l.addr }

// Taken is a connection taken out of an HTTP server (Take).
type Taken struct {
	Outer net.Conn // what the server held: a *Conn, or the listener's own wrapper of the socket
	Sock  net.Conn // the client's socket itself (*net.TCPConn): its descriptor is what is sent
	Data  []byte   // every byte read of it not yet answered: the request's head, then what followed
}

// Take takes r's connection out of the server that read it (Hijack), with
// the bytes it read: the head of r written again, then what the server's
// reader holds (the body, and any request that followed), then what a *Conn
// had not given yet. r's body must not have been read. An error is returned
// only when nothing was taken (the server still owns the connection).
func Take(w http.ResponseWriter, r *http.Request) (Taken, error) {
	head := AppendHead(make([]byte, 0, 512), r)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return Taken{}, err
	}
	t := Taken{Outer: c, Sock: c, Data: head}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		t.Data = append(t.Data, b...)
	}
	if pc, ok := c.(*Conn); ok {
		pc.detached.Store(true)
		t.Data = append(t.Data, pc.prefix...)
		pc.prefix = nil
		t.Sock = pc.Conn
	}
	for {
		if _, ok := t.Sock.(*net.TCPConn); ok {
			break
		}
		if _, ok := t.Sock.(*tls.Conn); ok {
			break // its bytes are not the client's
		}
		u, ok := t.Sock.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		t.Sock = u.NetConn()
	}
	return t, nil
}

// AppendHead appends r's request line and headers, as a server read them
// (Host and Transfer-Encoding, which net/http takes out of the headers,
// put back), ending with the empty line.
func AppendHead(b []byte, r *http.Request) []byte {
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.RequestURI...)
	b = append(b, ' ')
	b = append(b, r.Proto...)
	b = append(b, "\r\n"...)
	if r.Host != "" {
		b = append(b, "Host: "...)
		b = append(b, r.Host...)
		b = append(b, "\r\n"...)
	}
	for k, vs := range r.Header {
		if k == "Host" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if len(r.TransferEncoding) > 0 {
		b = append(b, "Transfer-Encoding: "...)
		b = append(b, strings.Join(r.TransferEncoding, ", ")...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}
