package daemon

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// controlAPI is the control API on its local socket (package control), and
// the owner of its credentials: the operator's token, made at each boot,
// and one token per agent, handed to it alone in its environment (spec.go).
// Its handlers act through the supervisor, the specs and the workers.
type controlAPI struct {
	cfg         *config.Config // Supervise: the timeouts of restart and stop
	log         zerolog.Logger
	runDir      string // the socket (or port file) and control.token
	limits      httpx.Limits
	super       *supervisor
	specs       *specs
	workers     *workers
	report      *reporter
	sessionTool http.HandlerFunc // POST /v1/sessions/{op} (sessions.go)

	token string // the operator's: DATA/run/control.token; set by serve
	addr  string // where it listens; set by serve, before any agent starts

	mu          sync.Mutex        // guards agentTokens and tokenOf
	agentTokens map[string]string // control token → the agent it was handed to
	tokenOf     map[string]string // agent id → its control token
}

// serve makes the operator's token and serves the control API on its
// local socket (see package control); what it opens it hands to
// closeLater.
func (c *controlAPI) serve(closeLater func(func())) error {
	var err error
	if c.token, err = control.NewToken(); err != nil {
		return err
	}
	ctrlLn, addr, err := control.Listen(c.runDir)
	if err != nil {
		return err
	}
	c.addr = addr
	if err := control.WriteToken(c.runDir, c.token); err != nil {
		ctrlLn.Close()
		return fmt.Errorf("control token: %w", err)
	}
	closeLater(func() { control.RemoveFiles(c.runDir) })
	ctrlSrv := httpx.NewServer(c.handler(), c.limits)
	go func() { _ = ctrlSrv.Serve(httpx.Listen(ctrlLn, c.limits, false, c.log)) }()
	closeLater(func() { shutdownServer(ctrlSrv) })
	return nil
}

// handler is the control API (see package control):
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
func (c *controlAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		httpx.Pretty(w, http.StatusOK, c.report.status(r.Context(), true))
	})
	mux.HandleFunc("POST /v1/agents/{id}/restart", operatorOnly(c.handleRestart))
	mux.HandleFunc("POST /v1/agents/{id}/stop", operatorOnly(c.handleStop))
	mux.HandleFunc("POST /v1/manage", c.handleManage)
	routes := httpx.Routes(mux)
	mux.HandleFunc("POST /v1/sessions/{op}", c.sessionTool)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpx.TokenOK(r, c.token) {
			routes.ServeHTTP(w, r)
			return
		}
		got, ok := httpx.Bearer(r)
		id, isAgent := c.tokenAgent(got)
		if !ok || !isAgent {
			writeError(w, &control.Error{Status: http.StatusUnauthorized, Code: control.CodeUnauthorized,
				Msg: "control API: missing or wrong token (DATA/run/control.token)"})
			return
		}
		if h := r.Header.Get(control.HeaderAgent); h != "" && h != id {
			c.log.Warn().Str("agent", id).Str("claimed", h).Msg("control API: an agent's token used in another agent's name; refused")
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
// agent and nothing else (see handler).
func (c *controlAPI) agentToken(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok, ok := c.tokenOf[id]; ok {
		return tok
	}
	if c.tokenOf == nil {
		c.tokenOf, c.agentTokens = map[string]string{}, map[string]string{}
	}
	tok := crand.Text()
	c.tokenOf[id], c.agentTokens[tok] = tok, id
	return tok
}

// tokenAgent returns the agent a control token was handed to.
func (c *controlAPI) tokenAgent(tok string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.agentTokens[tok]
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

func (c *controlAPI) handleRestart(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := c.super.member(id)
	if m == nil {
		writeError(w, unknownAgent(id))
		return
	}
	if c.super.isStopping() {
		writeError(w, ErrStopping)
		return
	}
	// A restart by hand is when a new blueprint may take effect.
	old := m.getSpec()
	role := ""
	if m.role == control.RoleWorker {
		role = control.RoleWorker
	}
	if spec, err := c.specs.resolveSpec(r.Context(), id, old.Template, old.Requester, role); err != nil {
		c.log.Warn().Str("agent", id).Err(err).Msg("restart: template not resolved again; keeping the frozen blueprint")
	} else {
		m.setSpec(spec)
	}
	if m.role == control.RoleWorker {
		_ = c.workers.reg.setStopped(id, false)
	}
	c.log.Info().Str("agent", id).Msgf("restart of %s requested", id)
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.Supervise.StopTimeout+c.cfg.Supervise.ReadyTimeout+5*time.Second)
	defer cancel()
	if err := m.send(ctx, cmdRestart); err != nil {
		writeError(w, &control.Error{Status: http.StatusBadGateway, Code: control.CodeInternal, Msg: err.Error()})
		return
	}
	httpx.Pretty(w, http.StatusOK, m.info())
}

func (c *controlAPI) handleStop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := c.super.member(id)
	if m == nil {
		writeError(w, unknownAgent(id))
		return
	}
	if m.role == control.RoleWorker {
		_ = c.workers.reg.setStopped(id, true)
	}
	c.log.Info().Str("agent", id).Msgf("stop of %s requested", id)
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.Supervise.StopTimeout+5*time.Second)
	defer cancel()
	if err := m.send(ctx, cmdStop); err != nil {
		writeError(w, &control.Error{Status: http.StatusBadGateway, Code: control.CodeInternal, Msg: err.Error()})
		return
	}
	httpx.Pretty(w, http.StatusOK, m.info())
}

// maxManageBytes bounds a POST /v1/manage body (a worker's task rides in it).
const maxManageBytes = 1 << 20

func (c *controlAPI) handleManage(w http.ResponseWriter, r *http.Request) {
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
		m := c.super.member(caller)
		if m == nil {
			writeError(w, unknownAgent(caller))
			return
		}
		if err := mayManage(caller, m.getSpec()); err != nil {
			c.log.Warn().Str("agent", caller).Str("action", req.Action).Msg("control API: agent_manager refused to an agent without the tool")
			writeError(w, err)
			return
		}
	}
	switch req.Action {
	case control.ActionSpawn:
		res, err := c.workers.spawn(r.Context(), requester, req)
		if err != nil {
			writeError(w, err)
			return
		}
		httpx.Pretty(w, http.StatusOK, res)
	case control.ActionList:
		httpx.Pretty(w, http.StatusOK, c.report.status(r.Context(), true).Agents)
	case control.ActionStop:
		if caller, ok := callerAgent(r); ok {
			if m := c.super.member(req.AgentID); m != nil && m.getSpec().Requester != caller {
				writeError(w, &control.Error{Status: http.StatusForbidden, Code: control.CodeForbidden,
					Msg: fmt.Sprintf("worker %s was not spawned by %s", req.AgentID, caller)})
				return
			}
		}
		info, err := c.workers.stop(r.Context(), req.AgentID)
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
