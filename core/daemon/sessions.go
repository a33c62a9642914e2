package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// The interruption reasons of the boot journal (session.ReasonCrash,
// session.ReasonPowerLoss).
const (
	reasonCrash     = "crash"
	reasonPowerLoss = "power_loss"
)

// Sessions is session continuity as the wiring hands it to the daemon
// (Options.Sessions), as it hands in Infra and Web: a SessionLink (the
// plugin sessions.daemon of transport/sessionapi: core/session's manager
// over the session store, sessionstore.sqlite, and the session API), or
// why there is none. The daemon links no session code of its own, so that
// a build without the store (-tags nosqlite) links none.
type Sessions struct {
	// Link is opened in boot phase 1. Nil: the daemon has no session
	// continuity, and every entry point to it (the session API, the
	// agents' session tools) answers Missing with 501; the boot journal is
	// still kept.
	Link SessionLink
	// Missing says why Link is nil: a build that left it out says so
	// (plugin.NotCompiledIn, "... built with -tags nosqlite").
	Missing error
}

// SessionLink is session continuity as the daemon runs it: a store and the
// manager of the plans over it, the session API, and the agents' session
// tools. Its methods are safe for concurrent use once Open returned.
type SessionLink interface {
	// Open opens the store (DATA/sessions.db) and marks the sessions the
	// previous run left open interrupted with reason (crash or
	// power_loss), returning how many.
	Open(ctx context.Context, env SessionEnv, reason string) (interrupted int, err error)
	// Start lets the plans run on the agents.
	Start(agents SessionAgents)
	// Resumable lists the interrupted sessions not yet resumed.
	Resumable(ctx context.Context) ([]SessionRef, error)
	// Resume resumes one of them.
	Resume(ctx context.Context, s SessionRef) error
	// StopDispatch stops the dispatchers without ending their sessions.
	StopDispatch()
	// Close stops the dispatchers and closes the store; with clean, the
	// active sessions end interrupted with reason shutdown.
	Close(clean bool) error
	// Routes adds the session API to the HTTP listener's mux.
	Routes(mux *http.ServeMux)
	// Tool answers an agent's session tool request: op is approval,
	// unknown_outcome, decision, approach or task; caller is the agent it
	// came from ("" when unknown), master the agent to name then. An
	// unknown op is an error wrapping ErrUnknownSessionTool.
	Tool(ctx context.Context, op, caller, master string, body []byte) (any, error)
	// ErrorStatus maps an error of Tool to an HTTP status and code.
	ErrorStatus(err error) (status int, code string)
	// Check reads the store back from the disk (the scrub): the damaged
	// parts found, those repaired, and the bytes checked.
	Check(ctx context.Context) (damage, repaired []string, checked int64, err error)
}

// SessionEnv is what a SessionLink is opened with.
type SessionEnv struct {
	Data               string // the data directory
	Log                zerolog.Logger
	Now                func() time.Time
	CheckpointInterval time.Duration // sessions.checkpoint_interval; 0: the default
}

// SessionRef names a session.
type SessionRef struct{ ProjectID, ID string }

// SessionAgents is what the daemon offers session continuity: its agents.
type SessionAgents interface {
	// Master is the master agent's id.
	Master() string
	// AgentType is the type of an agent's template ("" when unknown).
	AgentType(agentID string) string
	// RunTask hands a plan task (its JSON, and its task id) to an agent,
	// spawning a worker the plan names that does not run, and returns the
	// agent's result once finished. A task id the agent has seen is
	// answered from its record, never run again; an agent whose process
	// changed while it held the task is reported with an error wrapping
	// plugin.ErrAgentCrashed.
	RunTask(ctx context.Context, agentID, taskID string, task []byte) (SessionResult, error)
}

// SessionResult is an agent's result of a plan task.
type SessionResult struct {
	Status string // done, failed, unknown_outcome
	Output json.RawMessage
	Error  string
}

// ErrUnknownSessionTool is wrapped by SessionLink.Tool's error for an op it
// does not know.
var ErrUnknownSessionTool = errors.New("no such session tool")

// SessionsOpener makes a SessionLink over the session store named store
// ("sqlite"): the New of the plugins of kind sessions.
type SessionsOpener func(store string) (SessionLink, error)

// sessionsKind declares the plugin kind sessions.
var sessionsKind = plugin.DeclareKind(plugin.KindSessions, "daemon.SessionsOpener", plugin.Is[SessionsOpener])

// LookupSessions returns the registered SessionLink (the plugin
// sessions.daemon) over the session store named store ("sqlite"), or why
// there is none: a build tag that left it out (wrapping
// plugin.ErrNotCompiledIn), or a plugin not linked.
func LookupSessions(store string) (SessionLink, error) {
	const id = string(plugin.KindSessions) + ".daemon"
	info, ok := plugin.Lookup(id)
	if !ok {
		if tag, out := plugin.Omitted()[id]; out {
			return nil, plugin.NotCompiledIn("session continuity", tag)
		}
		return nil, errors.New("session continuity is not in this build: no plugin " + id + " (transport/sessionapi)")
	}
	return info.New.(SessionsOpener)(store)
}

// noSessions is why this daemon has no session continuity.
func (s Sessions) noSessions() error {
	if s.Missing != nil {
		return s.Missing
	}
	return errors.New("session continuity: none was handed to the daemon (Options.Sessions)")
}

// Error codes of a daemon without session continuity: the build left it
// out, or the wiring handed none in.
const (
	codeNotCompiledIn = "not_compiled_in"
	codeNoSessions    = "no_sessions"
)

// writeNoSessions answers a request to session continuity in a daemon that
// has none.
func (d *Daemon) writeNoSessions(w http.ResponseWriter) {
	why, code := d.o.Sessions.noSessions(), codeNoSessions
	if errors.Is(why, plugin.ErrNotCompiledIn) {
		code = codeNotCompiledIn
	}
	writeError(w, &control.Error{Status: http.StatusNotImplemented, Code: code, Msg: why.Error()})
}

// sessionAgents hands plan tasks to the daemon's agents through their own
// HTTP APIs: POST the task, then read its state until it is finished. A
// task id already seen is answered from the agent's record, never run
// again; a change of the agent's process while the task is in it is
// reported as plugin.ErrAgentCrashed.
type sessionAgents struct{ d *Daemon }

func (a sessionAgents) Master() string { return a.d.cfg.Master.Agent }

// AgentType is the type of an agent's template.
func (a sessionAgents) AgentType(id string) string {
	if m := a.d.member(id); m != nil {
		return m.getSpec().Type
	}
	return ""
}

// workerTemplate is the template of a worker a plan names that does not run.
const workerTemplate = "worker"

func (a sessionAgents) RunTask(ctx context.Context, agentID, taskID string, body []byte) (SessionResult, error) {
	d := a.d
	m := d.member(agentID)
	if m == nil {
		if agentID == a.Master() {
			return SessionResult{}, fmt.Errorf("the master %s is not supervised", agentID)
		}
		if _, err := d.spawnWorker(ctx, a.Master(), control.AgentRequest{Action: control.ActionSpawn, AgentID: agentID, Template: workerTemplate}); err != nil {
			var ce *control.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusConflict {
				return SessionResult{}, fmt.Errorf("spawning worker %s: %w", agentID, err)
			}
		}
		if m = d.member(agentID); m == nil {
			return SessionResult{}, fmt.Errorf("worker %s is not supervised", agentID)
		}
	}
	st, addr, _ := m.watch()
	if st != control.StateRunning {
		if st == control.StateCrashloop {
			return SessionResult{}, fmt.Errorf("agent %s is in crashloop: %w", agentID, plugin.ErrAgentCrashed)
		}
		return SessionResult{}, fmt.Errorf("agent %s is %s", agentID, st)
	}
	before := m.info()
	base := addr + "/agents/" + url.PathEscape(agentID) + "/tasks"
	req, err := http.NewRequestWithContext(ctx, "POST", base, bytes.NewReader(body))
	if err != nil {
		return SessionResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The plan: namespace is the dispatcher's alone: the agent accepts
	// such an id only with its own control token.
	req.Header.Set(httpx.HeaderPlanToken, d.agentToken(agentID))
	resp, err := d.httpc.Do(req)
	if err != nil {
		return SessionResult{}, a.crashed(m, before, err)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return SessionResult{}, fmt.Errorf("agent %s refused task %s: %s: %s", agentID, taskID, resp.Status, bytes.TrimSpace(data))
	}
	// The agent holds the task durably now; wait for its result.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var ts struct {
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
			Error  string          `json:"error"`
		}
		code, err := d.getJSON(ctx, base+"/"+url.PathEscape(taskID), &ts)
		if err == nil && code == http.StatusOK {
			switch ts.Status {
			case "done", "failed", "unknown_outcome":
				return SessionResult{Status: ts.Status, Output: ts.Output, Error: ts.Error}, nil
			}
		}
		if cerr := a.crashed(m, before, nil); cerr != nil {
			return SessionResult{}, cerr
		}
		select {
		case <-ctx.Done():
			return SessionResult{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// crashed returns plugin.ErrAgentCrashed when the agent's process is not the one
// that took the task (it died and was restarted, or is down); otherwise
// err as it is.
func (a sessionAgents) crashed(m *member, before control.AgentInfo, err error) error {
	now := m.info()
	if now.PID != before.PID || now.Restarts != before.Restarts || now.State != control.StateRunning {
		return fmt.Errorf("agent %s (pid %d) stopped while it held the task (now %s, pid %d): %w",
			m.id, before.PID, now.State, now.PID, plugin.ErrAgentCrashed)
	}
	return err
}

func (d *Daemon) getJSON(ctx context.Context, u string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := d.httpc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

// openSessions is boot phase 1's state check: the boot journal says how the
// previous run ended, sessions.db is opened and migrated (rebuilt from the
// project files when missing), and sessions left open by that run are
// marked interrupted with its reason. A failure stops the boot.
func (d *Daemon) openSessions(ctx context.Context) error {
	prev, err := d.openJournal()
	if err != nil {
		return err
	}
	if d.o.Sessions.Link == nil {
		// The boot journal only; a sessions.db left by a build that has
		// the store is not touched.
		ev := d.log.Info()
		if _, err := os.Stat(filepath.Join(d.data, "sessions.db")); err == nil {
			ev = d.log.Warn().Str("sessions_db", filepath.Join(d.data, "sessions.db"))
		}
		ev.Msg(d.o.Sessions.noSessions().Error())
		return nil
	}
	reason := reasonCrash
	if prev == PreviousPowerLoss {
		reason = reasonPowerLoss
	}
	open, err := d.o.Sessions.Link.Open(ctx, SessionEnv{Data: d.data, Log: d.sessionLog(), Now: d.now,
		CheckpointInterval: d.cfg.Sessions.CheckpointInterval}, reason)
	if err != nil {
		return err
	}
	d.sess = d.o.Sessions.Link
	if open > 0 {
		d.log.Warn().Int("sessions", open).Str("reason", reason).Msgf("%d session(s) interrupted (%s)", open, reason)
	}
	return nil
}

// startSessions lets the plans run once the master is up, and resumes
// interrupted sessions when sessions.auto_resume is set.
func (d *Daemon) startSessions(ctx context.Context) {
	if d.sess == nil {
		return
	}
	d.sess.Start(sessionAgents{d})
	if d.cfg.ScrubInterval > 0 {
		d.scrubs.Add(1)
		go func() {
			defer d.scrubs.Done()
			d.scrubSessions(d.life, d.cfg.ScrubInterval)
		}()
	}
	if !d.cfg.Sessions.AutoResume {
		if list, err := d.sess.Resumable(ctx); err == nil && len(list) > 0 {
			d.log.Info().Int("sessions", len(list)).Msg("interrupted sessions wait for a resume (sessions.auto_resume is off): `openstarry session list`")
		}
		return
	}
	list, err := d.sess.Resumable(ctx)
	if err != nil {
		d.log.Error().Err(err).Msg("listing interrupted sessions")
		return
	}
	for _, s := range list {
		if err := d.sess.Resume(ctx, s); err != nil {
			d.log.Error().Err(err).Str("session", s.ID).Msg("auto-resume failed")
		}
	}
}

// pauseSessions stops the dispatchers before a clean stop stops the agents:
// an agent that stops under a task is then not taken for a crashed one,
// and closeSessions records the sessions interrupted with reason shutdown.
func (d *Daemon) pauseSessions() {
	if d.sess != nil {
		d.sess.StopDispatch()
	}
}

// closeSessions ends the dispatchers; after a clean stop the journal says so.
func (d *Daemon) closeSessions(clean bool) {
	if d.sess == nil {
		if clean {
			d.journalCleanStop()
		}
		return
	}
	d.scrubs.Wait() // d.life has ended: the scrub returns
	if err := d.sess.Close(clean); err != nil {
		d.log.Warn().Err(err).Msg("closing sessions.db")
	}
	if clean {
		d.journalCleanStop()
	}
}

// sessionManager is session continuity as the daemon holds it once open;
// nil when it was handed none (Sessions).
type sessionManager = SessionLink

// sessionLog is the logger of session continuity.
func (d *Daemon) sessionLog() zerolog.Logger {
	return d.log.With().Str("component", "sessions").Logger()
}

// sessionRoutes adds the seed-003 API (projects, sessions, approvals) to
// the daemon's HTTP listener; without a store, every route of it answers
// why there is none.
func (d *Daemon) sessionRoutes(mux *http.ServeMux) {
	if d.o.Sessions.Link == nil {
		for _, p := range []string{"/projects", "/projects/", "/approvals", "/approvals/"} {
			mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { d.writeNoSessions(w) })
		}
		return
	}
	if d.sess != nil {
		d.sess.Routes(mux)
	}
}

// Tool requests of agents (approval_request, approach_record, task_update)
// through the control API, and the approvals of unknown outcomes an agent
// raises after a crash (unknown_outcome) and reads (decision).
func (d *Daemon) handleSessionTool(w http.ResponseWriter, r *http.Request) {
	if d.o.Sessions.Link == nil {
		caller, _ := callerAgent(r)
		d.log.Warn().Str("agent", caller).Str("op", r.PathValue("op")).Msg("session tool request refused: " + d.o.Sessions.noSessions().Error())
		d.writeNoSessions(w)
		return
	}
	if d.sess == nil {
		writeError(w, &control.Error{Status: http.StatusServiceUnavailable, Code: control.CodeStopping, Msg: "sessions are not open"})
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, badRequest("reading the body: %v", err))
		return
	}
	caller, _ := callerAgent(r)
	out, err := d.sess.Tool(r.Context(), r.PathValue("op"), caller, d.cfg.Master.Agent, data)
	if errors.Is(err, ErrUnknownSessionTool) {
		writeError(w, &control.Error{Status: http.StatusNotFound, Code: "not_found", Msg: "no session tool " + r.PathValue("op")})
		return
	}
	if err != nil {
		d.log.Warn().Err(err).Str("agent", caller).Str("op", r.PathValue("op")).Msg("session tool request refused")
		status, code := d.sess.ErrorStatus(err)
		writeError(w, &control.Error{Status: status, Code: code, Msg: err.Error()})
		return
	}
	httpx.Pretty(w, http.StatusOK, out)
}

// scrubSessions reads sessions.db back from the disk once per interval
// until ctx ends (the scrub, docs/storage-damage.md): damage is logged at
// error level and counted for /metrics, status and the telemetry; a damaged
// log frame that a later one supersedes is repaired by a checkpoint
// (sqlitedb.Check).
func (d *Daemon) scrubSessions(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		damage, repaired, n, err := d.sess.Check(ctx)
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		d.sessScrubs++
		d.sessDamage += uint64(len(damage))
		d.mu.Unlock()
		switch {
		case err != nil:
			d.log.Error().Err(err).Msg("scrub: sessions.db could not be checked")
		case len(damage) == 0:
			d.log.Debug().Int64("bytes", n).Msg("scrub: sessions.db read back without damage")
		default:
			for _, l := range damage {
				d.log.Error().Str("damage", l).Msg("scrub: sessions.db is damaged on the disk")
			}
			for _, l := range repaired {
				d.log.Warn().Str("repaired", l).Msg("scrub: a damaged part of sessions.db was rewritten from a good copy")
			}
		}
	}
}
