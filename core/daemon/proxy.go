package daemon

import (
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
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
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization") // the agent's API is loopback-only and needs none
		},
		Transport: d.httpc.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeError(w, &control.Error{Status: http.StatusBadGateway, Code: "agent_unreachable", Msg: "agent " + id + ": " + err.Error()})
		},
	}
	rp.ServeHTTP(w, r)
}

// proxyIdleConns is how many idle connections the daemon keeps to each
// agent's API. Concurrent submit-and-wait clients hold one request each
// for the length of a task; with fewer kept, every request above the
// number is made on a new connection that is closed after it, and 64
// clients go no faster than 8.
const proxyIdleConns = 64
