package daemon

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// controlHandler is the control API (see package control):
//
//	GET  /v1/status               the daemon and every agent
//	POST /v1/agents/{id}/restart  re-resolve the blueprint and restart (also out of crashloop)
//	POST /v1/agents/{id}/stop     stop; stays stopped until restart
//	POST /v1/manage               agent_manager: spawn, list, stop workers
//
// Every request needs a bearer token: the operator's (DATA/run/control.token,
// made at each boot) allows everything; an agent's (handed to it alone in
// its environment) allows status and agent_manager, acting as that agent
// only: the workers it spawns report to it, and it stops only those.
func (d *Daemon) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		httpx.Pretty(w, http.StatusOK, d.status(r.Context(), true))
	})
	mux.HandleFunc("POST /v1/agents/{id}/restart", operatorOnly(d.handleRestart))
	mux.HandleFunc("POST /v1/agents/{id}/stop", operatorOnly(d.handleStop))
	mux.HandleFunc("POST /v1/manage", d.handleManage)
	routes := httpx.Routes(mux)
	mux.HandleFunc("POST /v1/sessions/{op}", d.handleSessionTool)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpx.TokenOK(r, d.token) {
			routes.ServeHTTP(w, r)
			return
		}
		got, ok := httpx.Bearer(r)
		id, isAgent := d.tokenAgent(got)
		if !ok || !isAgent {
			writeError(w, &control.Error{Status: http.StatusUnauthorized, Code: control.CodeUnauthorized,
				Msg: "control API: missing or wrong token (DATA/run/control.token)"})
			return
		}
		if h := r.Header.Get(control.HeaderAgent); h != "" && h != id {
			d.log.Warn().Str("agent", id).Str("claimed", h).Msg("control API: an agent's token used in another agent's name; refused")
			writeError(w, &control.Error{Status: http.StatusForbidden, Code: control.CodeForbidden,
				Msg: fmt.Sprintf("control API: this token is agent %s's, not %s's", id, h)})
			return
		}
		r.Header.Set(control.HeaderAgent, id)
		routes.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), agentCaller{}, id)))
	})
}

// agentToken returns the control token of agent id, made at its first
// spawn and kept for the daemon's life. A request with it acts as that
// agent and nothing else (see controlHandler).
func (d *Daemon) agentToken(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if tok, ok := d.tokenOf[id]; ok {
		return tok
	}
	if d.tokenOf == nil {
		d.tokenOf, d.agentTokens = map[string]string{}, map[string]string{}
	}
	tok := crand.Text()
	d.tokenOf[id], d.agentTokens[tok] = tok, id
	return tok
}

// tokenAgent returns the agent a control token was handed to.
func (d *Daemon) tokenAgent(tok string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.agentTokens[tok]
	return id, ok
}

// agentCaller keys the id of the agent whose token a request carries; a
// request with the operator's token has none.
type agentCaller struct{}

func callerAgent(r *http.Request) (string, bool) {
	id, ok := r.Context().Value(agentCaller{}).(string)
	return id, ok
}

// operatorOnly refuses h to agents' tokens.
func operatorOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if id, ok := callerAgent(r); ok {
			writeError(w, &control.Error{Status: http.StatusForbidden, Code: control.CodeForbidden,
				Msg: fmt.Sprintf("control API: agent %s may not restart or stop agents; agent_manager stops the workers it spawned", id)})
			return
		}
		h(w, r)
	}
}

func (d *Daemon) handleRestart(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := d.member(id)
	if m == nil {
		writeError(w, unknownAgent(id))
		return
	}
	d.mu.Lock()
	stopping := d.stopping
	d.mu.Unlock()
	if stopping {
		writeError(w, ErrStopping)
		return
	}
	// A restart by hand is when a new blueprint may take effect.
	old := m.getSpec()
	role := ""
	if m.role == control.RoleWorker {
		role = control.RoleWorker
	}
	if spec, err := d.resolveSpec(r.Context(), id, old.Template, old.Requester, role); err != nil {
		d.log.Warn().Str("agent", id).Err(err).Msg("restart: template not resolved again; keeping the frozen blueprint")
	} else {
		m.setSpec(spec)
	}
	if m.role == control.RoleWorker {
		_ = d.reg.setStopped(id, false)
	}
	d.log.Info().Str("agent", id).Msgf("restart of %s requested", id)
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.Supervise.StopTimeout+d.cfg.Supervise.ReadyTimeout+5*time.Second)
	defer cancel()
	if err := m.send(ctx, cmdRestart); err != nil {
		writeError(w, &control.Error{Status: http.StatusBadGateway, Code: control.CodeInternal, Msg: err.Error()})
		return
	}
	httpx.Pretty(w, http.StatusOK, m.info())
}

func (d *Daemon) handleStop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := d.member(id)
	if m == nil {
		writeError(w, unknownAgent(id))
		return
	}
	if m.role == control.RoleWorker {
		_ = d.reg.setStopped(id, true)
	}
	d.log.Info().Str("agent", id).Msgf("stop of %s requested", id)
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.Supervise.StopTimeout+5*time.Second)
	defer cancel()
	if err := m.send(ctx, cmdStop); err != nil {
		writeError(w, &control.Error{Status: http.StatusBadGateway, Code: control.CodeInternal, Msg: err.Error()})
		return
	}
	httpx.Pretty(w, http.StatusOK, m.info())
}

// maxManageBytes bounds a POST /v1/manage body (a worker's task rides in it).
const maxManageBytes = 1 << 20

func (d *Daemon) handleManage(w http.ResponseWriter, r *http.Request) {
	var req control.AgentRequest
	body, err := httpx.ReadBody(w, r, maxManageBytes)
	if errors.Is(err, httpx.ErrTooLarge) {
		writeError(w, &control.Error{Status: http.StatusBadRequest, Code: httpx.CodeTooLarge,
			Msg: fmt.Sprintf("request is over the limit of %d bytes", maxManageBytes)})
		return
	}
	if err != nil {
		writeError(w, &control.Error{Status: http.StatusBadRequest, Code: httpx.CodeBadBody, Msg: "reading the body: " + err.Error()})
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, badRequest("bad request: %s", jsonerr.Describe("body", err)))
		return
	}
	requester := r.Header.Get(control.HeaderAgent)
	if caller, ok := callerAgent(r); ok {
		// An agent's token: only an agent whose blueprint has the tool.
		m := d.member(caller)
		if m == nil {
			writeError(w, unknownAgent(caller))
			return
		}
		if err := mayManage(caller, m.getSpec()); err != nil {
			d.log.Warn().Str("agent", caller).Str("action", req.Action).Msg("control API: agent_manager refused to an agent without the tool")
			writeError(w, err)
			return
		}
	}
	switch req.Action {
	case control.ActionSpawn:
		res, err := d.spawnWorker(r.Context(), requester, req)
		if err != nil {
			writeError(w, err)
			return
		}
		httpx.Pretty(w, http.StatusOK, res)
	case control.ActionList:
		httpx.Pretty(w, http.StatusOK, d.status(r.Context(), true).Agents)
	case control.ActionStop:
		if caller, ok := callerAgent(r); ok {
			if m := d.member(req.AgentID); m != nil && m.getSpec().Requester != caller {
				writeError(w, &control.Error{Status: http.StatusForbidden, Code: control.CodeForbidden,
					Msg: fmt.Sprintf("worker %s was not spawned by %s", req.AgentID, caller)})
				return
			}
		}
		info, err := d.stopWorker(r.Context(), req.AgentID)
		if err != nil {
			writeError(w, err)
			return
		}
		httpx.Pretty(w, http.StatusOK, info)
	default:
		writeError(w, badRequest("action %q: want spawn, list or stop", req.Action))
	}
}

func unknownAgent(id string) error {
	return refuse(ErrUnknownAgent, "no agent %s in this daemon", id)
}

// writeError answers err with the status and code httpError chooses.
func writeError(w http.ResponseWriter, err error) {
	ce := httpError(err)
	if ce.Status == 0 {
		ce.Status = http.StatusInternalServerError
	}
	httpx.Error(w, ce.Status, ce.Code, ce.Msg)
}
