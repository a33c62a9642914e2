package httpx

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Limits bound what one client can hold of a listener. The zero value of
// a field means its default.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers; default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's whole body, from the end of
	// its headers; default 30 s. A body still arriving then is cut: the
	// handler's read fails and the connection is closed. The deadline is
	// lifted once the body is read, so a long answer (a task waited for)
	// is not cut by it. (http.Server's ReadTimeout is not used: it would
	// also cancel such an answer.)
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request; default 2 min.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers; default 64 KiB.
	MaxHeaderBytes int
	// MaxConns caps the connections open at once; default 256. One more is
	// answered 503 too_many_connections and closed.
	MaxConns int
}

// Defaults of Limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 256
)

// WithDefaults fills the zero fields.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// NewServer returns an http.Server for h with the limits' timeouts and a
// body deadline on every request. Serve it on Listen's listener, which
// holds the connection cap.
func NewServer(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           BodyDeadline(h, l.BodyTimeout),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// BodyDeadline gives every request with a body d to send all of it.
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline when the body has been read whole.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Listen wraps ln with the cap on open connections (l.MaxConns). A
// connection over the cap is answered "503 too_many_connections" in JSON
// (plain close when tls, where no cleartext answer can be read) and
// closed; refusals are logged at warn, at most once a second with a count.
func Listen(ln net.Listener, l Limits, tls bool, log zerolog.Logger) net.Listener {
	l = l.WithDefaults()
	return &capListener{Listener: ln, sem: make(chan struct{}, l.MaxConns), tls: tls, log: log, max: l.MaxConns}
}

type capListener struct {
	net.Listener
	sem     chan struct{} // one token per open connection
	tls     bool
	log     zerolog.Logger
	max     int
	refused atomic.Int64
	lastLog atomic.Int64 // unix ns of the last refusal logged
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &capConn{Conn: c, l: l}, nil
		default:
			l.refuse(c)
		}
	}
}

var busyAnswer = func() []byte {
	body := errorBody(CodeBusy, "too many connections; try again later")
	return append([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
}()

func (l *capListener) refuse(c net.Conn) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastLog.Load(); now-last > int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
		l.log.Warn().Str("listener", l.Addr().String()).Int("max_conns", l.max).Int64("refused_total", n).
			Msg("http: connection cap reached; new connections are answered 503")
	}
	if l.tls {
		c.Close()
		return
	}
	go func() {
		// Answer, stop sending, and read briefly what the client sent so
		// that closing does not reset the connection before the client
		// has read the answer.
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(busyAnswer)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		c.Close()
	}()
}

// Refused returns how many connections a listener made by Listen refused.
func Refused(ln net.Listener) int64 {
	if l, ok := ln.(*capListener); ok {
		return l.refused.Load()
	}
	return 0
}

type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.sem })
	return err
}

// NetConn returns the connection c wraps: the daemon hands the client's
// socket itself to an agent (core/connpass), and keeps c, whose Close frees
// its place under the cap, until the agent closes the socket.
func (c *capConn) NetConn() net.Conn { return c.Conn }
