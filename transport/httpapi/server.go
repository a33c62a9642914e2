package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

// Agents finds the running agents the API serves.
type Agents interface {
	// Agent returns the runtime of a running agent, or nil.
	Agent(id string) *agent.Runtime
}

// Single serves one agent (openstarry run).
type Single struct{ R *agent.Runtime }

// Agent implements Agents.
func (s Single) Agent(id string) *agent.Runtime {
	if s.R != nil && s.R.ID() == id {
		return s.R
	}
	return nil
}

// Options configure the API.
type Options struct {
	Agents       Agents
	MaxTaskBytes int    // largest accepted task body; default 256 KiB
	Token        string // required from off loopback when set
	// LocalToken, when set, is required from every client, loopback
	// included: the daemon's per-boot token for its agents' ports, so that
	// another local user cannot reach an agent.
	LocalToken string
	// PlanToken, when set, lets a request carrying it in
	// httpx.HeaderPlanToken submit a task of the plan: namespace (the
	// daemon's dispatcher, with the agent's control token); without it,
	// such a task is refused with reserved_task_id.
	PlanToken string
	Log       zerolog.Logger
}

// Server is the HTTP handler.
type Server struct {
	opts    Options
	mux     *http.ServeMux
	handler http.Handler // mux behind the token check, unknown routes in JSON
}

// New returns the API handler.
func New(opts Options) *Server {
	if opts.MaxTaskBytes <= 0 {
		opts.MaxTaskBytes = 256 << 10
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /agents/{id}/tasks", s.postTask)
	s.mux.HandleFunc("GET /agents/{id}/tasks/{task}", s.getTask)
	s.mux.HandleFunc("GET /agents/{id}/snapshot", s.getSnapshot)
	s.mux.HandleFunc("GET /agents/{id}/current", s.getCurrent)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handler = httpx.TokenOffLoopback(opts.Token, s.tokenRefused, httpx.Routes(s.mux))
	if opts.LocalToken != "" {
		s.handler = httpx.TokenAlways(opts.LocalToken, s.tokenRefused, httpx.Routes(s.mux))
	}
	return s
}

// Handle adds a route (other packages add theirs: metrics, sessions, UI).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) tokenRefused(remote, path string) {
	s.opts.Log.Warn().Str("remote", remote).Str("path", path).Msg("http: missing or wrong token")
}

func (s *Server) agent(w http.ResponseWriter, r *http.Request) *agent.Runtime {
	id := r.PathValue("id")
	if err := agent.ValidateID(id); err != nil {
		httpx.Error(w, http.StatusBadRequest, "bad_agent_id", err.Error())
		return nil
	}
	rt := s.opts.Agents.Agent(id)
	if rt == nil {
		httpx.Error(w, http.StatusNotFound, "unknown_agent", "no agent "+id+" runs here")
	}
	return rt
}

func (s *Server) postTask(w http.ResponseWriter, r *http.Request) {
	rt := s.agent(w, r)
	if rt == nil {
		return
	}
	body, err := httpx.ReadBody(w, r, s.opts.MaxTaskBytes)
	if errors.Is(err, httpx.ErrTooLarge) {
		s.opts.Log.Warn().Str("agent", rt.ID()).Str("code", agent.CodeTooLarge).Int64("content_length", r.ContentLength).
			Msg("http: task rejected: body over the limit")
		httpx.Error(w, http.StatusBadRequest, agent.CodeTooLarge,
			fmt.Sprintf("task is over the limit of %d bytes", s.opts.MaxTaskBytes))
		return
	}
	if err != nil {
		s.opts.Log.Warn().Str("agent", rt.ID()).Err(err).Msg("http: task body not read")
		httpx.Error(w, http.StatusBadRequest, httpx.CodeBadBody, "reading the body: "+err.Error())
		return
	}
	decode := agent.DecodeTask
	if got := r.Header.Get(httpx.HeaderPlanToken); s.opts.PlanToken != "" && got != "" &&
		subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.PlanToken)) == 1 {
		decode = agent.DecodePlanTask
	}
	task, err := decode(body, s.opts.MaxTaskBytes)
	if err != nil {
		var te *agent.TaskError
		code := agent.CodeBadJSON
		if errors.As(err, &te) {
			code = te.Code
		}
		s.opts.Log.Warn().Str("agent", rt.ID()).Str("code", code).Err(err).Msg("http: task rejected")
		httpx.Error(w, http.StatusBadRequest, code, err.Error())
		return
	}
	ev, err := agent.TaskEvent(task, "http", time.Now().UnixMilli())
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, agent.CodeBadJSON, err.Error())
		return
	}
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	res := rt.Submit(r.Context(), ev)
	switch {
	case res.Err == nil && wait > 0:
		s.answerAfterWait(w, r, rt, task.TaskID, wait)
	case res.Err == nil && res.Duplicate:
		httpx.JSON(w, http.StatusOK, &res.State)
	case res.Err == nil:
		httpx.JSON(w, http.StatusAccepted, &res.State)
	case errors.Is(res.Err, agent.ErrQueueFull):
		httpx.Error(w, http.StatusServiceUnavailable, "queue_full", res.Err.Error())
	case errors.Is(res.Err, agent.ErrStopping), errors.Is(res.Err, agent.ErrStopped):
		httpx.Error(w, http.StatusServiceUnavailable, "stopping", res.Err.Error())
	case errors.Is(res.Err, context.Canceled):
		httpx.Error(w, http.StatusServiceUnavailable, "cancelled", "the request ended before the task was durable; send it again")
	default:
		s.opts.Log.Error().Str("agent", rt.ID()).Err(res.Err).Msg("http: task not accepted")
		httpx.Error(w, http.StatusInternalServerError, "not_durable", res.Err.Error())
	}
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	rt := s.agent(w, r)
	if rt == nil {
		return
	}
	id := r.PathValue("task")
	if err := agent.ValidateID(id); err != nil {
		httpx.Error(w, http.StatusBadRequest, agent.CodeBadTaskID, err.Error())
		return
	}
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	if wait > 0 {
		s.answerAfterWait(w, r, rt, id, wait)
		return
	}
	st, ok, err := rt.TaskState(r.Context(), id)
	switch {
	case err != nil:
		httpx.Error(w, http.StatusInternalServerError, "store_error", err.Error())
	case !ok:
		httpx.Error(w, http.StatusNotFound, "unknown_task", "no task "+id+" on agent "+rt.ID())
	default:
		if c := rt.Current(); st.Status == agent.TaskRunning && c != nil && c.TaskID == id {
			st.Current = c
		}
		httpx.JSON(w, http.StatusOK, &st)
	}
}

// getCurrent answers the task the agent has in hand (agent.Current), or
// null when it runs none.
func (s *Server) getCurrent(w http.ResponseWriter, r *http.Request) {
	rt := s.agent(w, r)
	if rt == nil {
		return
	}
	httpx.JSON(w, http.StatusOK, rt.Current())
}

// MaxWait bounds the wait query parameter.
const MaxWait = 60 * time.Second

// waitParam reads ?wait=DURATION (a Go duration: 500ms, 10s, 1m; at most
// MaxWait). It answers 400 itself when the value is bad.
func waitParam(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxWait {
		httpx.Error(w, http.StatusBadRequest, "bad_wait", fmt.Sprintf("wait=%q: want a duration from 0s to %s, such as 500ms or 10s", v, MaxWait))
		return 0, false
	}
	return d, true
}

// answerAfterWait answers with the task's state once it is final (200), or
// with its current state when the wait runs out first (202).
func (s *Server) answerAfterWait(w http.ResponseWriter, r *http.Request, rt *agent.Runtime, id string, wait time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	st, ok, err := rt.WaitTask(ctx, id)
	switch {
	case err != nil:
		httpx.Error(w, http.StatusInternalServerError, "store_error", err.Error())
	case !ok:
		httpx.Error(w, http.StatusNotFound, "unknown_task", "no task "+id+" on agent "+rt.ID())
	case st.Final():
		httpx.JSON(w, http.StatusOK, &st)
	default:
		httpx.JSON(w, http.StatusAccepted, &st)
	}
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	rt := s.agent(w, r)
	if rt == nil {
		return
	}
	snap, err := rt.Snapshot(r.Context())
	if err != nil {
		httpx.Error(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	data, err := agent.Encode(snap)
	if err != nil {
		httpx.Error(w, http.StatusInternalServerError, "encode", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(data, '\n'))
}
