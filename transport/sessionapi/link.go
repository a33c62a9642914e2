package sessionapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/session"
)

func init() {
	plugin.Register(plugin.Info{ID: string(plugin.KindSessions) + ".daemon",
		Description: "session continuity in the daemon: core/session's manager over a session store, and the session API",
		New:         daemon.SessionsOpener(NewLink)})
}

// NewLink returns session continuity as the daemon runs it
// (daemon.SessionLink) over the session store registered as store
// ("sqlite") and the JSON backup sessionbackup.files, unopened; an error
// says why there is no such store or backup.
func NewLink(store string) (daemon.SessionLink, error) {
	open, err := session.LookupStore(store)
	if err != nil {
		return nil, err
	}
	backup, err := session.LookupBackup("files")
	if err != nil {
		return nil, err
	}
	return &link{open: open, backup: backup}, nil
}

// link is a session.Manager as the daemon holds it.
type link struct {
	open   session.StoreOpener
	backup session.BackupOpener
	m      *session.Manager // set by Open
	log    zerolog.Logger
}

func (l *link) Open(ctx context.Context, env daemon.SessionEnv, reason string) (int, error) {
	m, err := session.Open(ctx, session.Options{Data: env.Data, Log: env.Log, OpenStore: l.open, OpenBackup: l.backup, Now: env.Now,
		CheckpointInterval: env.CheckpointInterval})
	if err != nil {
		return 0, fmt.Errorf("state database: %w", err)
	}
	l.m, l.log = m, env.Log
	open, err := m.ScanInterrupted(ctx, reason)
	return len(open), err
}

func (l *link) Start(agents daemon.SessionAgents) { l.m.SetAgents(agentsOf{agents}) }

func (l *link) Resumable(ctx context.Context) ([]daemon.SessionRef, error) {
	list, err := l.m.ResumableSessions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]daemon.SessionRef, len(list))
	for i, s := range list {
		out[i] = daemon.SessionRef{ProjectID: s.ProjectID, ID: s.ID}
	}
	return out, nil
}

func (l *link) Resume(ctx context.Context, s daemon.SessionRef) error {
	_, err := l.m.Resume(ctx, s.ProjectID, s.ID)
	return err
}

func (l *link) StopDispatch()                       { l.m.StopDispatch() }
func (l *link) Close(clean bool) error              { return l.m.Close(clean) }
func (l *link) Routes(mux *http.ServeMux)           { Routes(mux, l.m, l.log) }
func (l *link) ErrorStatus(err error) (int, string) { return session.StatusOf(err) }

func (l *link) Check(ctx context.Context) (damage, repaired []string, checked int64, err error) {
	return l.m.CheckDB(ctx)
}

// Tool answers the agents' session tools (approval_request,
// approach_record, task_update) and the approvals of unknown outcomes an
// agent raises after a crash (unknown_outcome) and reads (decision).
func (l *link) Tool(ctx context.Context, op, caller, master string, data []byte) (any, error) {
	leader := func(id *string) {
		if caller != "" {
			*id = caller
		}
		if *id == "" {
			*id = master
		}
	}
	switch op {
	case "approval":
		var req session.ApprovalRequest
		if err := session.DecodeToolRequest(data, &req); err != nil {
			return nil, err
		}
		leader(&req.LeaderID)
		return l.m.RequestApproval(ctx, &req)
	case "unknown_outcome":
		var req session.UnknownOutcomeRequest
		if err := session.DecodeToolRequest(data, &req); err != nil {
			return nil, err
		}
		leader(&req.LeaderID)
		return l.m.RequestUnknownOutcome(ctx, &req)
	case "decision":
		var req struct {
			ApprovalID int64 `json:"approval_id"`
		}
		if err := json.Unmarshal(data, &req); err != nil || req.ApprovalID <= 0 {
			return nil, fmt.Errorf("%w: want {\"approval_id\": a positive integer}", session.ErrBadRequest)
		}
		return l.m.Store().Approval(ctx, req.ApprovalID)
	case "approach":
		var req session.ApproachRecord
		if err := session.DecodeToolRequest(data, &req); err != nil {
			return nil, err
		}
		return l.m.RecordApproach(ctx, &req)
	case "task":
		var req session.TaskUpdate
		if err := session.DecodeToolRequest(data, &req); err != nil {
			return nil, err
		}
		return l.m.UpdateTask(ctx, &req)
	}
	return nil, fmt.Errorf("%w %s", daemon.ErrUnknownSessionTool, op)
}

// agentsOf hands the manager's plan tasks to the daemon's agents.
type agentsOf struct{ a daemon.SessionAgents }

func (g agentsOf) Master() string             { return g.a.Master() }
func (g agentsOf) AgentType(id string) string { return g.a.AgentType(id) }

func (g agentsOf) Run(ctx context.Context, agentID string, t session.AgentTask) (session.AgentResult, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return session.AgentResult{}, err
	}
	res, err := g.a.RunTask(ctx, agentID, t.TaskID, body)
	if err != nil {
		return session.AgentResult{}, err
	}
	return session.AgentResult{Status: res.Status, Output: res.Output, Error: res.Error}, nil
}

var (
	_ daemon.SessionLink = (*link)(nil)
	_ session.AgentTyper = agentsOf{}
)
