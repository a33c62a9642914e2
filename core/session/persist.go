package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// writeJSON writes v, indented, as the file f of the backup.
func (m *Manager) writeJSON(projectID, sessionID string, f BackupFile, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return m.backup.Write(projectID, sessionID, f, append(data, '\n'))
}

// writeProjectFile writes project.json.
func (m *Manager) writeProjectFile(p *Project, tasks []PlanTask) error {
	f := ProjectFileJSON{SchemaVersion: FileSchemaVersion, ID: p.ID, Name: p.Name, Description: p.Description,
		CreatedAt: p.CreatedAt, Tasks: make([]PlanTaskEntry, 0, len(tasks))}
	for _, t := range tasks {
		f.Tasks = append(f.Tasks, PlanTaskEntry{ID: t.ID, Phase: t.Phase, Type: t.TaskType, Name: t.Name, Input: t.Input,
			DependsOn: t.DependsOn, AssignedTo: t.AssignedTo, Approval: t.Approval})
	}
	return m.writeJSON(p.ID, "", FileProject, f)
}

// checkpointOf builds state_checkpoint.json from the database.
func (m *Manager) checkpointOf(ctx context.Context, projectID, sessionID string) (*CheckpointFile, error) {
	s, err := m.store.Session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	all, err := m.store.Tasks(ctx, projectID)
	if err != nil {
		return nil, err
	}
	aps, err := m.store.Approvals(ctx, projectID, "")
	if err != nil {
		return nil, err
	}
	approved := map[string]bool{}
	for _, a := range aps {
		if a.Status == ApprovalApproved {
			approved[a.TaskID] = true
		}
	}
	cp := &CheckpointFile{SchemaVersion: FileSchemaVersion, ProjectID: projectID, SessionID: sessionID,
		Timestamp: m.now().UTC(), CompletedTasks: []TaskRef{}, PendingTasks: []TaskRef{}, RemainingTasks: []TaskRef{},
		ContextSummary: s.ContextSummary, Session: s, Tasks: all, Approvals: []Approval{}}
	if s.InterruptionReason != "" {
		r := s.InterruptionReason
		cp.InterruptionReason = &r
	}
	cp.CurrentState.Phase = s.CurrentPhase
	if s.CurrentAgentRole != "" {
		id := s.CurrentAgentID
		if id == "" {
			id = s.CurrentAgentType // a session of a version that did not record the agent's id
		}
		cp.CurrentState.ActiveAgent = &ActiveAgent{Role: s.CurrentAgentRole, Type: s.CurrentAgentType, AgentID: id}
	}
	for _, a := range aps {
		if a.SessionID == sessionID {
			cp.Approvals = append(cp.Approvals, a)
		}
	}
	for _, t := range all {
		switch t.Status {
		case TaskCompleted:
			st := TaskCompleted
			if approved[t.ID] {
				st = "approved"
			}
			cp.CompletedTasks = append(cp.CompletedTasks, TaskRef{TaskID: t.ID, Status: st})
		case TaskInProgress, TaskBlocked, TaskFailed:
			p := t.ProgressPercent
			ref := TaskRef{TaskID: t.ID, Status: t.Status, Progress: &p}
			if t.Status == TaskBlocked {
				ref.BlockedBy = blockedBy(all, t)
			}
			cp.PendingTasks = append(cp.PendingTasks, ref)
		default:
			ref := TaskRef{TaskID: t.ID, Status: t.Status}
			if b := blockedBy(all, t); b != "" {
				ref.BlockedBy = b
			}
			cp.RemainingTasks = append(cp.RemainingTasks, ref)
		}
		if t.ID == s.CurrentTaskID {
			cp.CurrentState.ActiveTask = &ActiveTask{TaskID: t.ID, Name: t.Name, ProgressPercent: t.ProgressPercent}
		}
	}
	return cp, nil
}

// blockedBy names the first dependency of t not completed.
func blockedBy(all []PlanTask, t PlanTask) string {
	for _, d := range t.DependsOn {
		if i := indexOf(all, d); i >= 0 && all[i].Status != TaskCompleted {
			return d
		}
	}
	return ""
}

// saveFiles writes the session's state_checkpoint.json and
// remaining_tasks.json from the database (and approaches.json with all).
// A failure is logged: the database holds the state.
func (m *Manager) saveFiles(ctx context.Context, projectID, sessionID string, all bool) {
	if err := m.writeCheckpoint(ctx, projectID, sessionID); err != nil {
		m.log.Error().Err(err).Str("session", sessionID).Msg("state_checkpoint.json not written; the database holds the state")
	}
	if all {
		if err := m.writeApproaches(ctx, projectID, sessionID); err != nil {
			m.log.Error().Err(err).Str("session", sessionID).Msg("approaches.json not written; the database holds the approaches")
		}
	}
}

func (m *Manager) writeCheckpoint(ctx context.Context, projectID, sessionID string) error {
	m.cpMu.Lock()
	defer m.cpMu.Unlock()
	cp, err := m.checkpointOf(ctx, projectID, sessionID)
	if err != nil {
		return err
	}
	if err := m.backup.MakeSessionDirs(projectID, sessionID); err != nil {
		return err
	}
	if err := m.writeJSON(projectID, sessionID, FileCheckpoint, cp); err != nil {
		return err
	}
	rf := RemainingFileJSON{SchemaVersion: FileSchemaVersion, ProjectID: projectID, SessionID: sessionID,
		LastUpdated: cp.Timestamp, RemainingTasks: []RemainingTask{}}
	for _, t := range cp.Tasks {
		if t.Status == TaskCompleted {
			continue
		}
		rf.RemainingTasks = append(rf.RemainingTasks, RemainingTask{TaskID: t.ID, Name: t.Name, Phase: t.Phase,
			Status: t.Status, ProgressPercent: t.ProgressPercent, DependsOn: t.DependsOn, BlockedBy: blockedBy(cp.Tasks, t),
			AssignedTo: t.AssignedTo})
	}
	return m.writeJSON(projectID, sessionID, FileRemaining, rf)
}

func (m *Manager) approachesOf(ctx context.Context, projectID, sessionID string) (*ApproachesFileJSON, error) {
	list, err := m.store.Approaches(ctx, projectID, sessionID)
	if err != nil {
		return nil, err
	}
	f := &ApproachesFileJSON{SchemaVersion: FileSchemaVersion, SessionID: sessionID, LastUpdated: m.now().UTC(),
		Verified: []Approach{}, Failed: []Approach{}, Untried: []Approach{}}
	for _, a := range list {
		switch a.Kind {
		case ApproachVerified:
			f.Verified = append(f.Verified, a.Approach)
		case ApproachFailed:
			f.Failed = append(f.Failed, a.Approach)
		default:
			f.Untried = append(f.Untried, a.Approach)
		}
	}
	return f, nil
}

func (m *Manager) writeApproaches(ctx context.Context, projectID, sessionID string) error {
	f, err := m.approachesOf(ctx, projectID, sessionID)
	if err != nil {
		return err
	}
	return m.writeJSON(projectID, sessionID, FileApproaches, f)
}

// readCheckpoint reads state_checkpoint.json; a missing or damaged file
// loses to the database: it is rebuilt from it and rewritten, with a
// warning.
func (m *Manager) readCheckpoint(ctx context.Context, projectID, sessionID string) (*CheckpointFile, error) {
	path := m.lay.Checkpoint(projectID, sessionID)
	data, err := m.backup.Read(projectID, sessionID, FileCheckpoint)
	if err == nil {
		cp, derr := DecodeCheckpoint(data)
		if derr == nil && cp.ProjectID == projectID && cp.SessionID == sessionID {
			return cp, nil
		}
		if derr == nil {
			derr = fmt.Errorf("%w: names %s/%s", ErrDamaged, cp.ProjectID, cp.SessionID)
		}
		m.log.Warn().Str("file", path).Err(derr).Msgf("%s is damaged: the database wins; rewriting it from sessions.db", path)
	} else if !errors.Is(err, ErrNoFile) {
		m.log.Warn().Str("file", path).Err(err).Msg("state_checkpoint.json unreadable: the database wins")
	}
	if err := m.writeCheckpoint(ctx, projectID, sessionID); err != nil {
		m.log.Error().Err(err).Str("file", path).Msg("rewriting state_checkpoint.json")
	}
	return m.checkpointOf(ctx, projectID, sessionID)
}

// approachesFile reads approaches.json, the database winning over a damaged
// or inconsistent file, which is then rewritten.
func (m *Manager) approachesFile(ctx context.Context, projectID, sessionID string) (*ApproachesFileJSON, error) {
	path := m.lay.ApproachesFile(projectID, sessionID)
	data, err := m.backup.Read(projectID, sessionID, FileApproaches)
	if err == nil {
		f, derr := DecodeApproaches(data)
		if derr == nil && f.SessionID == sessionID {
			return f, nil
		}
		if derr == nil {
			derr = fmt.Errorf("%w: names session %s", ErrDamaged, f.SessionID)
		}
		m.log.Warn().Str("file", path).Err(derr).Msgf("%s is damaged: the database wins; rewriting it from sessions.db", path)
	} else if !errors.Is(err, ErrNoFile) {
		m.log.Warn().Str("file", path).Err(err).Msg("approaches.json unreadable: the database wins")
	}
	if err := m.writeApproaches(ctx, projectID, sessionID); err != nil {
		m.log.Error().Err(err).Str("file", path).Msg("rewriting approaches.json")
	}
	return m.approachesOf(ctx, projectID, sessionID)
}

// checkFiles reads every project's files at open: each damaged one is
// rewritten from the database (logged).
func (m *Manager) checkFiles(ctx context.Context) error {
	projects, err := m.store.Projects(ctx)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	for _, p := range projects {
		path := m.lay.ProjectFile(p.ID)
		data, err := m.backup.Read(p.ID, "", FileProject)
		var derr error
		if err == nil {
			var f *ProjectFileJSON
			if f, derr = DecodeProjectFile(data); derr == nil && f.ID != p.ID {
				derr = fmt.Errorf("%w: names project %s", ErrDamaged, f.ID)
			}
		} else {
			derr = err
		}
		if derr != nil {
			m.log.Warn().Str("file", path).Err(derr).Msgf("%s is damaged or missing: the database wins; rewriting it from sessions.db", path)
			tasks, err := m.store.Tasks(ctx, p.ID)
			if err != nil {
				return err
			}
			if err := m.writeProjectFile(&p, tasks); err != nil {
				m.log.Error().Err(err).Str("file", path).Msg("rewriting project.json")
			}
		}
		sessions, err := m.store.Sessions(ctx, p.ID)
		if err != nil {
			return err
		}
		for _, s := range sessions {
			if _, err := m.readCheckpoint(ctx, p.ID, s.ID); err != nil {
				return err
			}
			if _, err := m.approachesFile(ctx, p.ID, s.ID); err != nil {
				return err
			}
			rp := m.lay.RemainingFile(p.ID, s.ID)
			if data, err := m.backup.Read(p.ID, s.ID, FileRemaining); err != nil || !remainingOK(data, s.ID) {
				m.log.Warn().Str("file", rp).Msgf("%s is damaged or missing: the database wins; rewriting it from sessions.db", rp)
				if err := m.writeCheckpoint(ctx, p.ID, s.ID); err != nil {
					m.log.Error().Err(err).Str("file", rp).Msg("rewriting remaining_tasks.json")
				}
			}
		}
	}
	return nil
}

func remainingOK(data []byte, sessionID string) bool {
	f, err := DecodeRemaining(data)
	return err == nil && f.SessionID == sessionID
}

// rebuild fills an empty database from DATA/projects: project.json for the
// project and its plan, then each session's state_checkpoint.json (oldest
// first) for the session rows, the task states and the approvals, and
// approaches.json for the approaches. It returns the projects rebuilt.
func (m *Manager) rebuild(ctx context.Context) (int, error) {
	names, err := m.backup.Projects()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if ValidateProjectID(name) != nil {
			continue
		}
		if err := m.rebuildProject(ctx, name); err != nil {
			m.log.Error().Err(err).Str("project", name).Msgf("project %s could not be rebuilt from its files", name)
			continue
		}
		n++
	}
	return n, nil
}

func (m *Manager) rebuildProject(ctx context.Context, projectID string) error {
	data, err := m.backup.Read(projectID, "", FileProject)
	if err != nil {
		return err
	}
	pf, err := DecodeProjectFile(data)
	if err != nil {
		return fmt.Errorf("project.json: %w", err)
	}
	if pf.ID != projectID {
		return fmt.Errorf("project.json names %s", pf.ID)
	}
	// The sessions, oldest first.
	names, _ := m.backup.Sessions(projectID)
	var cps []*CheckpointFile
	for _, name := range names {
		if ValidateSessionID(name) != nil {
			continue
		}
		data, err := m.backup.Read(projectID, name, FileCheckpoint)
		if err != nil {
			m.log.Warn().Err(err).Str("session", name).Msg("rebuild: session without a readable checkpoint; skipped")
			continue
		}
		cp, err := DecodeCheckpoint(data)
		if err != nil || cp.Session == nil || cp.SessionID != name {
			m.log.Warn().Err(err).Str("session", name).Msg("rebuild: damaged checkpoint; session skipped")
			continue
		}
		cps = append(cps, cp)
	}
	sort.Slice(cps, func(i, j int) bool { return cps[i].Session.StartedAt.Before(cps[j].Session.StartedAt) })
	if len(cps) == 0 {
		return errors.New("no session with a readable state_checkpoint.json")
	}
	p := &Project{ID: pf.ID, Name: pf.Name, Description: pf.Description, CreatedAt: pf.CreatedAt}
	// Tasks: as planned, then as the newest checkpoint that knows each.
	tasks := make([]PlanTask, 0, len(pf.Tasks))
	for i, t := range pf.Tasks {
		tasks = append(tasks, PlanTask{ID: t.ID, SessionID: cps[0].SessionID, ProjectID: projectID, Seq: i, Phase: t.Phase,
			TaskType: t.Type, Name: t.Name, Input: t.Input, Status: TaskPending, AssignedTo: t.AssignedTo,
			DependsOn: t.DependsOn, Approval: t.Approval})
	}
	for _, cp := range cps {
		for _, t := range cp.Tasks {
			t.State = ""
			if i := indexOf(tasks, t.ID); i >= 0 {
				tasks[i] = t
			} else {
				tasks = append(tasks, t)
			}
		}
	}
	for i := range tasks {
		if tasks[i].DependsOn == nil {
			tasks[i].DependsOn = []string{}
		}
	}
	if err := m.store.InsertProject(ctx, p, nil, nil); err != nil {
		return err
	}
	for _, cp := range cps {
		s := *cp.Session
		if err := m.store.InsertSession(ctx, &s); err != nil {
			return err
		}
	}
	if err := m.store.PutTasks(ctx, tasks); err != nil {
		return err
	}
	for _, cp := range cps {
		for _, a := range cp.Approvals {
			a := a
			if _, err := m.store.InsertApproval(ctx, &a); err != nil {
				return err
			}
		}
		data, err := m.backup.Read(projectID, cp.SessionID, FileApproaches)
		if err != nil {
			continue
		}
		af, err := DecodeApproaches(data)
		if err != nil {
			m.log.Warn().Err(err).Str("session", cp.SessionID).Msg("rebuild: approaches.json damaged; its approaches are lost")
			continue
		}
		for kind, list := range map[string][]Approach{ApproachVerified: af.Verified, ApproachFailed: af.Failed, ApproachUntried: af.Untried} {
			for _, a := range list {
				if err := m.store.PutApproach(ctx, projectID, cp.SessionID, kind, a, af.LastUpdated); err != nil {
					return err
				}
			}
		}
	}
	m.log.Warn().Str("project", projectID).Int("sessions", len(cps)).Int("tasks", len(tasks)).
		Msgf("rebuilt project %s in sessions.db from its JSON files (%d sessions, %d tasks)", projectID, len(cps), len(tasks))
	return nil
}

// lastAlive is the last moment a session left open by a process that died
// was known to be alive: the newest of its start, its checkpoint's
// timestamp (written at every event and periodically), and the times of
// its tasks and approvals. A crash's ended_at is that moment, not the next
// boot's.
func (m *Manager) lastAlive(ctx context.Context, s *Session) time.Time {
	last := s.StartedAt
	later := func(t *time.Time) {
		if t != nil && t.After(last) {
			last = *t
		}
	}
	if data, err := m.backup.Read(s.ProjectID, s.ID, FileCheckpoint); err == nil {
		if cp, err := DecodeCheckpoint(data); err == nil && cp.SessionID == s.ID {
			later(&cp.Timestamp)
		}
	}
	if tasks, err := m.store.Tasks(ctx, s.ProjectID); err == nil {
		for _, t := range tasks {
			if t.SessionID == s.ID {
				later(t.StartedAt)
				later(t.CompletedAt)
			}
		}
	}
	if aps, err := m.store.Approvals(ctx, s.ProjectID, ""); err == nil {
		for _, a := range aps {
			if a.SessionID == s.ID {
				later(&a.SubmittedAt)
				later(a.ResolvedAt)
			}
		}
	}
	return last
}

// endSession ends a session: ended_at, status, reason, a fresh summary,
// and every file.
func (m *Manager) endSession(ctx context.Context, projectID, sessionID, status, reason string) {
	m.endSessionAt(ctx, projectID, sessionID, status, reason, time.Time{})
}

// endSessionAt is endSession with the time it ended (zero: now).
func (m *Manager) endSessionAt(ctx context.Context, projectID, sessionID, status, reason string, at time.Time) {
	m.mu.Lock()
	s, err := m.store.Session(ctx, sessionID)
	if err == nil && s.EndedAt == nil {
		now := m.now().UTC()
		if !at.IsZero() && at.Before(now) {
			now = at.UTC()
		}
		s.EndedAt, s.Status, s.InterruptionReason = &now, status, reason
		if tasks, terr := m.store.Tasks(ctx, projectID); terr == nil {
			s.ContextSummary = contextSummary(tasks, reason)
		}
		err = m.store.UpdateSession(ctx, s)
	}
	m.mu.Unlock()
	if err != nil {
		m.log.Error().Err(err).Str("session", sessionID).Msg("ending the session")
		return
	}
	m.saveFiles(ctx, projectID, sessionID, true)
}
