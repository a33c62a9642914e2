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
	"github.com/openstarry/openstarry-edge/core/session"
)

// Sessions is session continuity as the wiring hands it to the daemon
// (Options.Sessions), as it hands in Infra and Web: the store, a plugin of
// kind sessionstore (storage/sessionsql, sessions.db), and the session API
// (transport/sessionapi). The daemon holds the logic (core/session's
// Manager) between them.
type Sessions struct {
	// Store opens DATA/sessions.db in boot phase 1. Nil: the daemon has
	// no session continuity, and every entry point to it (the session API,
	// the agents' session tools) answers Missing with 501; the boot
	// journal is still kept.
	Store session.StoreOpener
	// Missing says why Store is nil: a build that left the store out says
	// so (plugin.NotCompiledIn, "... built with -tags nosqlite").
	Missing error
	// Routes adds the session API to the HTTP listener's mux; required
	// with Store.
	Routes func(mux *http.ServeMux, m *session.Manager, log zerolog.Logger)
}

// check refuses a store without its API: a missing piece is an error at
// start, never a silent default.
func (s Sessions) check() error {
	if s.Store != nil && s.Routes == nil {
		return errors.New("daemon: Options.Sessions has a store but no Routes (transport/sessionapi.Routes)")
	}
	return nil
}

// noSessions is why this daemon has no session continuity.
func (s Sessions) noSessions() error {
	if s.Missing != nil {
		return s.Missing
	}
	return errors.New("session continuity: no session store was handed to the daemon (Options.Sessions)")
}

// Error codes of a daemon without session continuity: the build left the
// store out, or the wiring handed none in.
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
// reported as session.ErrAgentCrashed.
type sessionAgents struct{ d *Daemon }

func (a sessionAgents) Master() string { return a.d.cfg.Master.Agent }

// AgentType is the type of an agent's template (session.AgentTyper).
func (a sessionAgents) AgentType(id string) string {
	if m := a.d.member(id); m != nil {
		return m.getSpec().Type
	}
	return ""
}

// workerTemplate is the template of a worker a plan names that does not run.
const workerTemplate = "worker"

func (a sessionAgents) Run(ctx context.Context, agentID string, t session.AgentTask) (session.AgentResult, error) {
	d := a.d
	m := d.member(agentID)
	if m == nil {
		if agentID == a.Master() {
			return session.AgentResult{}, fmt.Errorf("the master %s is not supervised", agentID)
		}
		if _, err := d.spawnWorker(ctx, a.Master(), control.AgentRequest{Action: control.ActionSpawn, AgentID: agentID, Template: workerTemplate}); err != nil {
			var ce *control.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusConflict {
				return session.AgentResult{}, fmt.Errorf("spawning worker %s: %w", agentID, err)
			}
		}
		if m = d.member(agentID); m == nil {
			return session.AgentResult{}, fmt.Errorf("worker %s is not supervised", agentID)
		}
	}
	st, addr, _ := m.watch()
	if st != control.StateRunning {
		if st == control.StateCrashloop {
			return session.AgentResult{}, fmt.Errorf("agent %s is in crashloop: %w", agentID, session.ErrAgentCrashed)
		}
		return session.AgentResult{}, fmt.Errorf("agent %s is %s", agentID, st)
	}
	before := m.info()
	body, err := json.Marshal(t)
	if err != nil {
		return session.AgentResult{}, err
	}
	base := addr + "/agents/" + url.PathEscape(agentID) + "/tasks"
	req, err := http.NewRequestWithContext(ctx, "POST", base, bytes.NewReader(body))
	if err != nil {
		return session.AgentResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The plan: namespace is the dispatcher's alone: the agent accepts
	// such an id only with its own control token.
	req.Header.Set(httpx.HeaderPlanToken, d.agentToken(agentID))
	resp, err := d.httpc.Do(req)
	if err != nil {
		return session.AgentResult{}, a.crashed(m, before, err)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return session.AgentResult{}, fmt.Errorf("agent %s refused task %s: %s: %s", agentID, t.TaskID, resp.Status, bytes.TrimSpace(data))
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
		code, err := d.getJSON(ctx, base+"/"+url.PathEscape(t.TaskID), &ts)
		if err == nil && code == http.StatusOK {
			switch ts.Status {
			case "done", "failed", "unknown_outcome":
				return session.AgentResult{Status: ts.Status, Output: ts.Output, Error: ts.Error}, nil
			}
		}
		if cerr := a.crashed(m, before, nil); cerr != nil {
			return session.AgentResult{}, cerr
		}
		select {
		case <-ctx.Done():
			return session.AgentResult{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// crashed returns ErrAgentCrashed when the agent's process is not the one
// that took the task (it died and was restarted, or is down); otherwise
// err as it is.
func (a sessionAgents) crashed(m *member, before control.AgentInfo, err error) error {
	now := m.info()
	if now.PID != before.PID || now.Restarts != before.Restarts || now.State != control.StateRunning {
		return fmt.Errorf("agent %s (pid %d) stopped while it held the task (now %s, pid %d): %w",
			m.id, before.PID, now.State, now.PID, session.ErrAgentCrashed)
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
	if d.o.Sessions.Store == nil {
		// The boot journal only; a sessions.db left by a build that has
		// the store is not touched.
		ev := d.log.Info()
		if _, err := os.Stat(filepath.Join(d.data, "sessions.db")); err == nil {
			ev = d.log.Warn().Str("sessions_db", filepath.Join(d.data, "sessions.db"))
		}
		ev.Msg(d.o.Sessions.noSessions().Error())
		return nil
	}
	m, err := session.Open(ctx, session.Options{Data: d.data, Log: d.sessionLog(), OpenStore: d.o.Sessions.Store,
		Now: d.now, CheckpointInterval: d.cfg.Sessions.CheckpointInterval})
	if err != nil {
		return fmt.Errorf("state database: %w", err)
	}
	d.sess = m
	reason := session.ReasonCrash
	if prev == PreviousPowerLoss {
		reason = session.ReasonPowerLoss
	}
	open, err := m.ScanInterrupted(ctx, reason)
	if err != nil {
		return err
	}
	if len(open) > 0 {
		d.log.Warn().Int("sessions", len(open)).Str("reason", reason).Msgf("%d session(s) interrupted (%s)", len(open), reason)
	}
	return nil
}

// startSessions lets the plans run once the master is up, and resumes
// interrupted sessions when sessions.auto_resume is set.
func (d *Daemon) startSessions(ctx context.Context) {
	if d.sess == nil {
		return
	}
	d.sess.SetAgents(sessionAgents{d})
	if d.cfg.ScrubInterval > 0 {
		d.scrubs.Add(1)
		go func() {
			defer d.scrubs.Done()
			d.scrubSessions(d.life, d.cfg.ScrubInterval)
		}()
	}
	if !d.cfg.Sessions.AutoResume {
		if list, err := d.sess.ResumableSessions(ctx); err == nil && len(list) > 0 {
			d.log.Info().Int("sessions", len(list)).Msg("interrupted sessions wait for a resume (sessions.auto_resume is off): `openstarry session list`")
		}
		return
	}
	list, err := d.sess.ResumableSessions(ctx)
	if err != nil {
		d.log.Error().Err(err).Msg("listing interrupted sessions")
		return
	}
	for _, s := range list {
		if _, err := d.sess.Resume(ctx, s.ProjectID, s.ID); err != nil {
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

// sessionManager is session continuity as the daemon holds it; nil when
// it was handed no store (Sessions).
type sessionManager = *session.Manager

// sessionLog is the logger of session continuity.
func (d *Daemon) sessionLog() zerolog.Logger {
	return d.log.With().Str("component", "sessions").Logger()
}

// sessionRoutes adds the seed-003 API (projects, sessions, approvals) to
// the daemon's HTTP listener; without a store, every route of it answers
// why there is none.
func (d *Daemon) sessionRoutes(mux *http.ServeMux) {
	if d.o.Sessions.Store == nil {
		for _, p := range []string{"/projects", "/projects/", "/approvals", "/approvals/"} {
			mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { d.writeNoSessions(w) })
		}
		return
	}
	if d.sess != nil {
		d.o.Sessions.Routes(mux, d.sess, d.sessionLog())
	}
}

// Tool requests of agents (approval_request, approach_record, task_update)
// through the control API, and the approvals of unknown outcomes an agent
// raises after a crash (unknown_outcome) and reads (decision).
func (d *Daemon) handleSessionTool(w http.ResponseWriter, r *http.Request) {
	if d.o.Sessions.Store == nil {
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
	var out any
	switch r.PathValue("op") {
	case "approval":
		var req session.ApprovalRequest
		if err = session.DecodeToolRequest(data, &req); err == nil {
			if caller != "" {
				req.LeaderID = caller
			}
			if req.LeaderID == "" {
				req.LeaderID = d.cfg.Master.Agent
			}
			out, err = d.sess.RequestApproval(r.Context(), &req)
		}
	case "unknown_outcome":
		var req session.UnknownOutcomeRequest
		if err = session.DecodeToolRequest(data, &req); err == nil {
			if caller != "" {
				req.LeaderID = caller
			}
			if req.LeaderID == "" {
				req.LeaderID = d.cfg.Master.Agent
			}
			out, err = d.sess.RequestUnknownOutcome(r.Context(), &req)
		}
	case "decision":
		var req struct {
			ApprovalID int64 `json:"approval_id"`
		}
		if err = json.Unmarshal(data, &req); err != nil || req.ApprovalID <= 0 {
			err = fmt.Errorf("%w: want {\"approval_id\": a positive integer}", session.ErrBadRequest)
		} else {
			out, err = d.sess.Store().Approval(r.Context(), req.ApprovalID)
		}
	case "approach":
		var req session.ApproachRecord
		if err = session.DecodeToolRequest(data, &req); err == nil {
			out, err = d.sess.RecordApproach(r.Context(), &req)
		}
	case "task":
		var req session.TaskUpdate
		if err = session.DecodeToolRequest(data, &req); err == nil {
			out, err = d.sess.UpdateTask(r.Context(), &req)
		}
	default:
		writeError(w, &control.Error{Status: http.StatusNotFound, Code: "not_found", Msg: "no session tool " + r.PathValue("op")})
		return
	}
	if err != nil {
		d.log.Warn().Err(err).Str("agent", caller).Str("op", r.PathValue("op")).Msg("session tool request refused")
		status, code := session.StatusOf(err)
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
		damage, repaired, n, err := d.sess.CheckDB(ctx)
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
