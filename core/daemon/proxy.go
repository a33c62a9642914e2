package daemon

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

// proxyAgent passes /agents/{id}/... to the agent's own API.
func (d *Daemon) proxyAgent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := d.member(id)
	if m == nil {
		writeError(w, unknownAgent(id))
		return
	}
	st, addr, _ := m.watch()
	if st != control.StateRunning {
		writeError(w, &control.Error{Status: http.StatusServiceUnavailable, Code: "agent_not_running",
			Msg: "agent " + id + " is " + st + "; try again when it runs"})
		return
	}
	target, err := url.Parse(addr)
	if err != nil {
		writeError(w, err)
		return
	}
	if lk := m.passLink(); lk != nil && target.Scheme == "http" && passable(r) && d.super.pass.handOff(w, r, lk) {
		// The client's connection is the agent's now (pass.go).
		return
	}
	if a, ok := d.httpc.Transport.(*agentAuth); ok && forwardable(r) && target.Scheme == "http" {
		// The common path (forward.go): no ReverseProxy, no transport
		// goroutines.
		var be errBody
		switch err := a.forward(w, r, target.Host); {
		case errors.As(err, &be):
			writeError(w, &control.Error{Status: http.StatusBadRequest, Code: httpx.CodeBadBody, Msg: err.Error()})
		case err != nil:
			writeError(w, &control.Error{Status: http.StatusBadGateway, Code: "agent_unreachable", Msg: "agent " + id + ": " + err.Error()})
		}
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization") // the client's; the transport (agentAuth) sends the daemon's
		},
		Transport:  d.httpc.Transport,
		BufferPool: proxyBuffers,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeError(w, &control.Error{Status: http.StatusBadGateway, Code: "agent_unreachable", Msg: "agent " + id + ": " + err.Error()})
		},
	}
	rp.ServeHTTP(w, r)
}

// agentAuth sends the daemon's per-boot token to the agents' ports, which
// require it from every client (control.EnvAPIToken).
type agentAuth struct {
	token string
	base  http.RoundTripper
	conns agentConns // the fast path's connections (forward.go)
}

func (a *agentAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	return a.base.RoundTrip(r)
}

// proxyBuffers lends the reverse proxy the buffers it copies answers
// through. Without a pool it allocates and clears 32 KiB for every
// request: at 64 submit-and-wait clients that was the daemon's largest
// allocation, and with the collection it caused, about a fifth of its
// processor time (perf, BenchmarkEndToEndHTTP's load).
var proxyBuffers httputil.BufferPool = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// proxyIdleConns is how many idle connections the daemon keeps to each
// agent's API. Concurrent submit-and-wait clients hold one request each
// for the length of a task; with fewer kept, every request above the
// number is made on a new connection that is closed after it, and 64
// clients go no faster than 8.
const proxyIdleConns = 64
