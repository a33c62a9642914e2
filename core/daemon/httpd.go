package daemon

import (
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/connpass"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

// httpAPI is the daemon's HTTP listener (http.listen), when configured:
// its routes, the web UI around them (Options.Web), the pass-through to
// the agents' own APIs (proxy.go) and the session API (sessions.go). It
// owns the listener and its address; what it answers it reads from the
// reporter.
type httpAPI struct {
	cfg           *config.Config // HTTP: listen, token, hosts
	log           zerolog.Logger
	limits        httpx.Limits
	web           func(api http.Handler) http.Handler // Options.Web; nil: none
	report        *reporter
	proxy         http.HandlerFunc         // /agents/{id}/...: Daemon.proxyAgent (proxy.go)
	pass          *connPass                // the connection hand-off (pass.go); nil: off
	sessionRoutes func(mux *http.ServeMux) // the session API (sessions.go)

	mu   sync.Mutex // guards addr: the control API reports it while the boot sets it
	addr string     // "http://host:port"; set by serve, "" without http.listen
}

// address is the listener's address, "http://host:port", or "" before it
// is open or without http.listen.
func (h *httpAPI) address() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addr
}

// serve serves the HTTP listener (http.listen), when configured; what it
// opens it hands to closeLater.
func (h *httpAPI) serve(closeLater func(func())) error {
	if h.cfg.HTTP.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", h.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", h.cfg.HTTP.Listen, err)
	}
	addr := "http://" + ln.Addr().String()
	h.mu.Lock()
	h.addr = addr
	h.mu.Unlock()
	hd := h.handler()
	if h.web != nil {
		hd = h.web(hd)
	}
	hd = httpx.AllowHosts(h.cfg.HTTP.Hosts, hd)
	srv := httpx.NewServer(hd, h.limits)
	go func() { _ = srv.Serve(httpx.Listen(ln, h.limits, false, h.log)) }()
	closeLater(func() { shutdownServer(srv) })
	if h.pass != nil {
		// The connections agents handed back (pass.go), served as the
		// listener's own.
		again := httpx.NewServer(hd, h.limits)
		again.ConnContext = connpass.ConnContext
		go func() { _ = again.Serve(h.pass.ln) }()
		closeLater(func() { shutdownServer(again) })
	}
	h.log.Info().Str("addr", addr).Msgf("daemon listening on %s", addr)
	return nil
}

// handler is the daemon's HTTP listener (http.listen):
//
//	GET /healthz          200 when booted, the master runs and the infrastructure is up (or off by configuration); 503 otherwise
//	GET /metrics          Prometheus text: the daemon, the infrastructure, every agent
//	GET /status           the JSON of `openstarry status --json`
//	/agents/{id}/...      passed through to the agent's own API (tasks, snapshot)
//
// A bearer token (http.token) is required from off loopback when set.
func (h *httpAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.report.healthz)
	mux.HandleFunc("GET /metrics", h.report.metrics)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		httpx.Pretty(w, http.StatusOK, h.report.status(r.Context(), true))
	})
	mux.HandleFunc("/agents/{id}/", h.proxy)
	h.sessionRoutes(mux)
	return httpx.TokenOffLoopback(h.cfg.HTTP.Token, func(remote, path string) {
		h.log.Warn().Str("remote", remote).Str("path", path).Msg("http: missing or wrong token")
	}, httpx.Routes(mux))
}
