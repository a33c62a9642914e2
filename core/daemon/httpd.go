package daemon

import (
	"net/http"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

// httpHandler is the daemon's HTTP listener (http.listen):
//
//	GET /healthz          200 when booted, the master runs and the infrastructure is up (or off by configuration); 503 otherwise
//	GET /metrics          Prometheus text: the daemon, the infrastructure, every agent
//	GET /status           the JSON of `openstarry status --json`
//	/agents/{id}/...      passed through to the agent's own API (tasks, snapshot)
//
// A bearer token (http.token) is required from off loopback when set.
func (d *Daemon) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", d.healthz)
	mux.HandleFunc("GET /metrics", d.metrics)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		httpx.Pretty(w, http.StatusOK, d.status(r.Context(), true))
	})
	mux.HandleFunc("/agents/{id}/", d.proxyAgent)
	d.sessionRoutes(mux)
	return httpx.TokenOffLoopback(d.cfg.HTTP.Token, func(remote, path string) {
		d.log.Warn().Str("remote", remote).Str("path", path).Msg("http: missing or wrong token")
	}, httpx.Routes(mux))
}

type health struct {
	Status string            `json:"status"` // ok, booting, degraded, stopping
	Master string            `json:"master"` // the master's state
	Agents map[string]string `json:"agents"` // id → state
	Infra  map[string]string `json:"infra,omitempty"`
	// StateStore is "ok", or "not durable: …" when a Save may not survive
	// a crash of the store's host (which does not make the daemon degraded).
	StateStore string `json:"state_store,omitempty"`
	// Templates says, per agent, which template it runs and where the
	// daemon found it; Degraded lists what booted from the cache because
	// the design layer could not be used (the daemon still answers 200:
	// it works, on the last good blueprint).
	Templates map[string]templateHealth `json:"templates,omitempty"`
	Degraded  []string                  `json:"degraded,omitempty"`
}

type templateHealth struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
}

func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	h := health{Status: "ok", Agents: map[string]string{}, Infra: map[string]string{}, Templates: map[string]templateHealth{}}
	for _, m := range d.sortedMembers() {
		st, _, _ := m.watch()
		h.Agents[m.id] = st
		if m.role == control.RoleMaster {
			h.Master = st
		}
		a := m.info()
		h.Templates[m.id] = templateHealth{Name: a.Template, Version: a.TemplateVersion, Source: a.Source}
		if a.Degraded {
			h.Degraded = append(h.Degraded, m.id+": "+a.DegradedReason)
		}
	}
	d.mu.Lock()
	booted, stopping := d.booted, d.stopping
	up := append([]bool(nil), d.infraUp...)
	if d.store != nil {
		h.StateStore = "ok"
		if !d.store.Durable {
			h.StateStore = "not durable: " + d.store.Warning
		}
	}
	d.mu.Unlock()
	degraded := h.Master != control.StateRunning
	for i, inf := range d.o.Infra {
		s := "up"
		if i >= len(up) || !up[i] {
			s, degraded = "down", true
		}
		if sr, ok := inf.(StatusReporter); ok {
			if st := sr.Status(); st.Off {
				s = "off"
			} else if !st.Up {
				s, degraded = "down", true
				if st.Detail != "" {
					s += ": " + st.Detail
				}
			}
		}
		h.Infra[inf.Name()] = s
	}
	code := http.StatusOK
	switch {
	case stopping:
		h.Status, code = "stopping", http.StatusServiceUnavailable
	case !booted:
		h.Status, code = "booting", http.StatusServiceUnavailable
	case degraded:
		h.Status, code = "degraded", http.StatusServiceUnavailable
	}
	httpx.Pretty(w, code, h)
}
