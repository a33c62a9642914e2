package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The daemon's hop to an agent's API, on the common path: a request whose
// body is small and of known length (a task, a GET) is forwarded by the
// handler's own goroutine on a kept-alive connection to the agent, written
// in one write and its answer read back, with no other goroutine involved.
//
// httputil.ReverseProxy over http.Transport, which the daemon used for
// every request and still uses for the others (a large or chunked body),
// passes each request through two more goroutines per connection (the
// transport's writeLoop and readLoop), copies the request's headers twice
// (ReverseProxy's outbound request, agentAuth's clone) and sends the headers
// and the body in two writes. At 8 submit-and-wait clients the hop was a
// third of the processor time of a task (perf and /proc schedstat under
// BenchmarkEndToEndHTTP's load); forwarded this way, the daemon's share
// falls by about 40% (docs/figures.md). What the reverse proxy did that
// matters here is done the same way: hop-by-hop headers and the client's
// Authorization and Forwarded headers are dropped, the daemon's token is
// sent, a client that goes away cancels the agent's side, a streamed answer
// is flushed as it comes, and an agent that cannot be reached is answered
// 502 agent_unreachable. One thing differs: a kept connection that the
// agent closed unseen (it answered nothing at all) is replaced and the
// request sent again once, a task included: a task is taken once by its
// task_id, so sending it twice runs it once.

// forwardMaxBody is the largest request body the fast path buffers (a task
// is far smaller); a larger one, or one of unknown length, goes through
// httputil.ReverseProxy, which streams it.
const forwardMaxBody = 64 << 10

// forwardIdle is how long an idle connection to an agent is kept: well
// under the agent's own idle timeout (httpx.DefaultIdleTimeout), so that
// the agent does not close one as the daemon sends on it.
const forwardIdle = 30 * time.Second

// agentConn is one kept-alive connection to an agent's API.
type agentConn struct {
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	idle time.Time // when it was put back
}

// agentConns are the idle connections to the agents' APIs, by address
// (host:port); the zero value is ready.
type agentConns struct {
	mu   sync.Mutex
	idle map[string][]*agentConn
}

// get returns an idle connection to addr, or nil.
func (p *agentConns) get(addr string, now time.Time) *agentConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[addr]
	for len(list) > 0 {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if now.Sub(c.idle) < forwardIdle {
			p.idle[addr] = list
			return c
		}
		_ = c.c.Close()
	}
	delete(p.idle, addr)
	return nil
}

// put keeps c for the next request to addr (at most proxyIdleConns per
// address); connections idle for too long, to addr or to an agent that
// moved, are closed on the way.
func (p *agentConns) put(addr string, c *agentConn, now time.Time) {
	c.idle = now
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[string][]*agentConn{}
	}
	for a, list := range p.idle {
		// The oldest are first: drop the expired prefix.
		n := 0
		for n < len(list) && now.Sub(list[n].idle) >= forwardIdle {
			_ = list[n].c.Close()
			n++
		}
		switch {
		case n == len(list):
			delete(p.idle, a)
		case n > 0:
			p.idle[a] = append(list[:0], list[n:]...)
		}
	}
	if len(p.idle[addr]) >= proxyIdleConns {
		_ = c.c.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], c)
}

// forwardable reports whether r can take the fast path: a body of known
// length no larger than forwardMaxBody, and no protocol switch.
func forwardable(r *http.Request) bool {
	if r.ContentLength < 0 || r.ContentLength > forwardMaxBody || len(r.TransferEncoding) > 0 {
		return false
	}
	return r.Header.Get("Upgrade") == "" && r.ProtoMajor == 1
}

// errForward is an error of the hop itself (the agent could not be
// reached, or broke off): the client is answered 502.
type errForward struct{ err error }

func (e errForward) Error() string { return e.err.Error() }
func (e errForward) Unwrap() error { return e.err }

// errBody is an error reading the client's body: it is answered 400.
type errBody struct{ err error }

func (e errBody) Error() string { return "reading the body: " + e.err.Error() }
func (e errBody) Unwrap() error { return e.err }

// forward passes r to the agent listening on addr (host:port) and copies its
// answer to w. r must be forwardable. An error (errBody, errForward) is
// returned only when nothing was written to w yet.
func (a *agentAuth) forward(w http.ResponseWriter, r *http.Request, addr string) error {
	bufp := fwdBuffers.Get().(*[]byte)
	defer fwdBuffers.Put(bufp)
	body := (*bufp)[:0]
	if r.ContentLength > 0 {
		if cap(body) < int(r.ContentLength)+1 {
			body = make([]byte, 0, r.ContentLength+1)
		}
		// Read to the end of the body, not to its length: only then does
		// the server watch the client's connection, and cancel the
		// request's context when the client goes away.
		for {
			n, err := r.Body.Read(body[len(body):cap(body)])
			body = body[:len(body)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return errBody{err}
			}
			if len(body) == cap(body) {
				return errBody{errors.New("longer than its Content-Length")}
			}
		}
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		c, reused := a.conns.get(addr, time.Now()), true
		if c == nil {
			nc, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return errForward{err}
			}
			c, reused = &agentConn{c: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, false
		}
		resp, err := a.roundTrip(ctx, c, r, addr, body)
		if err != nil {
			_ = c.c.Close()
			if reused && attempt == 0 && ctx.Err() == nil && errors.Is(err, errStale) {
				continue // the agent closed it while idle (it restarted): once more on a new one
			}
			return errForward{err}
		}
		keep := a.copyAnswer(w, resp, c, ctx)
		if keep {
			a.conns.put(addr, c, time.Now())
		} else {
			_ = c.c.Close()
		}
		return nil
	}
}

// errStale says a kept connection answered nothing at all: closed by the
// agent, the request not taken.
var errStale = errors.New("connection closed before any answer")

// roundTrip writes r (with body) on c and reads the head of the answer.
// A client that goes away meanwhile breaks the connection off, which
// cancels the agent's side of the request.
func (a *agentAuth) roundTrip(ctx context.Context, c *agentConn, r *http.Request, addr string, body []byte) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	bw := c.bw
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(r.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(addr)
	bw.WriteString("\r\nAuthorization: Bearer ")
	bw.WriteString(a.token)
	bw.WriteString("\r\n")
	conn := r.Header["Connection"]
	for k, vs := range r.Header {
		if dropHeader(k, conn) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if len(body) > 0 || r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(len(body)))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	bw.Write(body)
	if err := bw.Flush(); err != nil {
		// The agent may have answered (and closed) already.
		if _, perr := c.br.Peek(1); perr != nil {
			return nil, staleOr(err)
		}
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, staleOr(err)
	}
	head := &http.Request{Method: r.Method}
	for {
		resp, err := http.ReadResponse(c.br, head)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		// An interim answer (the agent's 100 Continue, though Expect is
		// not sent): the final one follows.
	}
}

// staleOr classifies an error from a connection that answered nothing.
func staleOr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isConnReset(err) {
		return errStale
	}
	return err
}

func isConnReset(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	s := err.Error() // Windows' WSAECONNRESET
	return strings.Contains(s, "connection reset") || strings.Contains(s, "forcibly closed")
}

// copyAnswer writes resp to w and reports whether c can carry another
// request (the answer was read whole and the agent keeps it open).
func (a *agentAuth) copyAnswer(w http.ResponseWriter, resp *http.Response, c *agentConn, ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	h := w.Header()
	conn := resp.Header["Connection"]
	for k, vs := range resp.Header {
		if hopByHop(k, conn) {
			continue
		}
		h[k] = vs
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	bufp := proxyCopyBuffers.Get().(*[]byte)
	defer proxyCopyBuffers.Put(bufp)
	buf := *bufp
	flusher, _ := w.(http.Flusher)
	streamed := resp.ContentLength < 0
	var err error
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				err = werr
				break
			}
			if streamed && flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
	}
	_ = resp.Body.Close()
	for k, vs := range resp.Trailer {
		h[http.TrailerPrefix+k] = vs
	}
	// Kept only if the client's end did not (and now cannot) break it off:
	// a connection put back with a deadline in the past would fail the
	// next request.
	return stop() && err == nil && !resp.Close
}

// dropHeader reports whether the request header k is not passed on:
// hop-by-hop headers, the client's Authorization (the daemon sends its
// own), Forwarded and X-Forwarded-* (as httputil.ReverseProxy with Rewrite
// drops them), Content-Length (written from the body read), Host, and
// Expect (the body is read already).
func dropHeader(k string, connection []string) bool {
	switch k {
	case "Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"Content-Length", "Host", "Expect":
		return true
	}
	return hopByHop(k, connection)
}

// hopByHop reports whether header k concerns one connection only: the
// hop-by-hop headers of RFC 9110 7.6.1 and those the Connection header
// names.
func hopByHop(k string, connection []string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	for _, v := range connection {
		for f := range strings.SplitSeq(v, ",") {
			if textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)) == k {
				return true
			}
		}
	}
	return false
}

// fwdBuffers hold the bodies of forwarded requests.
var fwdBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// proxyCopyBuffers hold the answers being copied to the client.
var proxyCopyBuffers = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}
