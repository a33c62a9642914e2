package resp

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Client.
type Options struct {
	Addr     string      // host:port
	Username string      // the ACL user; "" for the default user
	Password string      // "" when the server asks for none
	DB       int         // the database SELECTed on each new connection
	TLS      *tls.Config // nil for plain TCP

	DialTimeout  time.Duration // connecting, TLS and AUTH; default 5 s
	ReadTimeout  time.Duration // waiting for the replies of one round trip; default 3 s
	WriteTimeout time.Duration // writing one round trip's commands; default ReadTimeout
	PoolSize     int           // idle connections kept; default 4
}

// Parameters are the URL query parameters ParseURL takes.
var Parameters = []string{"dial_timeout", "read_timeout", "write_timeout", "pool_size"}

// ParseURL reads redis://[[user]:password@]host[:port][/db] and the same
// with rediss:// for TLS (server name checked against host, TLS 1.2 or
// newer, the system's roots). Its query may hold the Parameters; any
// other is an error. The port defaults to 6379, the database to 0.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	switch u.Scheme {
	case "redis":
	case "rediss":
		o.TLS = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	default:
		return o, fmt.Errorf("scheme %q: want redis or rediss", u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "6379"
	}
	o.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return o, fmt.Errorf("database %q: want a number", p)
		}
		o.DB = db
	}
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		var d *time.Duration
		switch k {
		case "dial_timeout":
			d = &o.DialTimeout
		case "read_timeout":
			d = &o.ReadTimeout
		case "write_timeout":
			d = &o.WriteTimeout
		case "pool_size":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return o, fmt.Errorf("pool_size=%q: want a number of connections, at least 1", v)
			}
			o.PoolSize = n
			continue
		default:
			return o, fmt.Errorf("unknown parameter %q (this store takes %s)", k, strings.Join(Parameters, ", "))
		}
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return o, fmt.Errorf("%s=%q: want a positive duration such as 2s", k, v)
		}
		*d = t
	}
	return o, nil
}

// ErrClosed is returned by the calls on a closed Client.
var ErrClosed = errors.New("redis: client closed")

// Client is a pool of connections to one server. It is safe for
// concurrent use.
type Client struct {
	o Options

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// New returns a client; it connects at the first command.
func New(o Options) *Client {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 3 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = o.ReadTimeout
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 4
	}
	return &Client{o: o}
}

// Options returns the client's options, defaults filled in.
func (c *Client) Options() Options { return c.o }

// Do sends one command and returns its reply. An error reply is returned
// as the reply and as its Error.
func (c *Client) Do(ctx context.Context, args ...any) (Reply, error) {
	rs, err := c.Pipeline(ctx, args)
	if err != nil {
		return Reply{}, err
	}
	return rs[0], rs[0].Err()
}

// Pipeline sends the commands in one write and returns their replies, in
// order. The error is the connection's: a server's error reply to one of
// the commands is in its Reply.
func (c *Client) Pipeline(ctx context.Context, cmds ...[]any) ([]Reply, error) {
	var buf []byte
	for _, args := range cmds {
		var err error
		if buf, err = appendCommand(buf, args); err != nil {
			return nil, err
		}
	}
	cn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	rs, reuse, err := cn.roundTrip(ctx, &c.o, buf, len(cmds))
	c.put(cn, reuse)
	return rs, err
}

// Close closes the idle connections; those in use are closed when their
// command returns. Calls after Close return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, cn := range idle {
		errs = append(errs, cn.nc.Close())
	}
	return errors.Join(errs...)
}

// get returns an idle connection that is still open, or a new one.
func (c *Client) get(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			return c.dial(ctx)
		}
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if open(cn.nc) {
			return cn, nil
		}
		_ = cn.nc.Close() // the server closed it (a restart, its idle timeout)
	}
}

// put returns a connection to the pool, or closes it when its last round
// trip failed, the client is closed or the pool is full.
func (c *Client) put(cn *conn, ok bool) {
	if ok {
		c.mu.Lock()
		if !c.closed && len(c.idle) < c.o.PoolSize {
			c.idle = append(c.idle, cn)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	_ = cn.nc.Close()
}

// dial connects, shakes hands for TLS, and sends AUTH and SELECT.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", c.o.Addr)
	if err != nil {
		return nil, err
	}
	if c.o.TLS != nil {
		tc := tls.Client(nc, c.o.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		nc = tc
	}
	cn := &conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10)}
	var cmds [][]any
	switch {
	case c.o.Username != "":
		cmds = append(cmds, []any{"AUTH", c.o.Username, c.o.Password})
	case c.o.Password != "":
		cmds = append(cmds, []any{"AUTH", c.o.Password})
	}
	if c.o.DB != 0 {
		cmds = append(cmds, []any{"SELECT", c.o.DB})
	}
	if len(cmds) == 0 {
		return cn, nil
	}
	var buf []byte
	for _, args := range cmds {
		buf, _ = appendCommand(buf, args)
	}
	rs, reuse, err := cn.roundTrip(ctx, &c.o, buf, len(cmds))
	if err == nil && !reuse {
		err = context.Cause(ctx)
	}
	if err == nil {
		for i, r := range rs {
			if err = r.Err(); err != nil {
				err = fmt.Errorf("%s: %w", cmds[i][0], err)
				break
			}
		}
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return cn, nil
}

// conn is one connection to the server.
type conn struct {
	nc net.Conn
	br *bufio.Reader
}

// aLongTimeAgo is a deadline that makes blocked reads and writes return.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes buf, which holds n commands, and reads their n replies.
// reuse is false when the connection must be closed: after an error, or
// when the context ended as the replies came.
func (cn *conn) roundTrip(ctx context.Context, o *Options, buf []byte, n int) (rs []Reply, reuse bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	// The context's end interrupts the I/O in progress by moving its
	// deadline to the past.
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(aLongTimeAgo) })
	rs, err = cn.exchange(ctx, o, buf, n)
	// stop reports false when the interruption ran or is running: then
	// the connection is not reused, even with complete replies.
	stopped := stop()
	if err != nil {
		if cerr := ended(ctx); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, false, err
	}
	return rs, stopped, nil
}

// ended returns the context's error, or context.DeadlineExceeded once its
// deadline passed: the connection's deadline, which is the context's,
// may expire before the context's own timer fires.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func (cn *conn) exchange(ctx context.Context, o *Options, buf []byte, n int) ([]Reply, error) {
	if err := cn.nc.SetWriteDeadline(earliest(ctx, time.Now().Add(o.WriteTimeout))); err != nil {
		return nil, err
	}
	if _, err := cn.nc.Write(buf); err != nil {
		return nil, err
	}
	if err := cn.nc.SetReadDeadline(earliest(ctx, time.Now().Add(o.ReadTimeout))); err != nil {
		return nil, err
	}
	rs := make([]Reply, n)
	for i := range rs {
		r, err := readReply(cn.br)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}

func earliest(ctx context.Context, t time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok && d.Before(t) {
		return d
	}
	return t
}

// Script is a Lua script sent by its SHA1, with its source when the server
// does not know it yet.
type Script struct {
	src, sha string
}

// NewScript returns the script of src.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(h[:])}
}

// Run runs the script with keys and args: EVALSHA, and EVAL when the
// server answers NOSCRIPT (it restarted, or its script cache was flushed).
// NOSCRIPT means the script did not run, so sending it again is safe.
func (s *Script) Run(ctx context.Context, c *Client, keys []string, args ...any) (Reply, error) {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "EVALSHA", s.sha, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	cmd = append(cmd, args...)
	r, err := c.Do(ctx, cmd...)
	var e Error
	if errors.As(err, &e) && strings.HasPrefix(string(e), "NOSCRIPT") {
		cmd[0], cmd[1] = "EVAL", s.src
		return c.Do(ctx, cmd...)
	}
	return r, err
}
