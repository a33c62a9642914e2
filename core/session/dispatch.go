package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// run is the dispatcher of one active session: it hands the plan's ready
// tasks to agents one at a time, in dependency order, and applies their
// results.
type run struct {
	projectID, sessionID string
	resume               json.RawMessage // a resumed session's context, sent with each of its tasks
	wake                 chan struct{}
	summaries            int // session_summary tasks sent, for their ids
}

func (m *Manager) startRun(projectID, sessionID string, resume json.RawMessage) {
	m.mu.Lock()
	if m.life.Err() != nil || m.runs[sessionID] != nil {
		m.mu.Unlock()
		return
	}
	r := &run{projectID: projectID, sessionID: sessionID, resume: resume, wake: make(chan struct{}, 1)}
	m.runs[sessionID] = r
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		m.loop(m.life, r)
		m.mu.Lock()
		delete(m.runs, sessionID)
		m.mu.Unlock()
	}()
}

// wake tells a session's dispatcher that something changed (a decision,
// an update from an agent).
func (m *Manager) wake(sessionID string) {
	m.mu.Lock()
	r := m.runs[sessionID]
	m.mu.Unlock()
	if r != nil {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

type step int

const (
	stepRun step = iota
	stepWait
	stepDone
	stepStuck
)

func (m *Manager) loop(ctx context.Context, r *run) {
	// The periodic checkpoint, besides the event moments. The loop returns
	// only after it: a checkpoint still being written when Close returned
	// would race the caller's next step (a removal, a new Manager).
	tickDone, tickExited := make(chan struct{}), make(chan struct{})
	defer func() { close(tickDone); <-tickExited }()
	go func() {
		defer close(tickExited)
		t := time.NewTicker(m.o.CheckpointInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := m.writeCheckpoint(ctx, r.projectID, r.sessionID); err != nil {
					m.log.Error().Err(err).Str("session", r.sessionID).Msg("periodic checkpoint failed")
				} else {
					m.log.Debug().Str("session", r.sessionID).Msg("periodic checkpoint saved")
				}
			case <-tickDone:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	agents := m.waitAgents(ctx)
	if agents == nil {
		return
	}
	for ctx.Err() == nil {
		st, t := m.next(ctx, r)
		switch st {
		case stepDone:
			m.endSession(context.Background(), r.projectID, r.sessionID, SessionCompleted, "")
			m.log.Info().Str("project", r.projectID).Str("session", r.sessionID).Msgf("session %s completed: every task of project %s is done", r.sessionID, r.projectID)
			m.refreshSummary(ctx, r, agents)
			return
		case stepStuck:
			m.interrupt(ctx, r, ReasonError, errors.New("a task failed and the rest of the plan depends on it"))
			m.refreshSummary(ctx, r, agents)
			return
		case stepWait:
			select {
			case <-r.wake:
			case <-ctx.Done():
				return
			}
		case stepRun:
			if !m.runTask(ctx, r, agents, t) {
				return
			}
		}
	}
}

func (m *Manager) waitAgents(ctx context.Context) Agents {
	for {
		if a := m.getAgents(); a != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.o.PollInterval):
		}
	}
}

func (m *Manager) sleep(ctx context.Context, r *run) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
		return true
	case <-time.After(m.o.PollInterval):
		return true
	}
}

// interrupt ends the session interrupted with reason.
func (m *Manager) interrupt(ctx context.Context, r *run, reason string, err error) {
	if ctx.Err() != nil {
		return // shutting down: Close decides
	}
	m.endSession(context.Background(), r.projectID, r.sessionID, SessionInterrupted, reason)
	m.log.Warn().Err(err).Str("project", r.projectID).Str("session", r.sessionID).Str("reason", reason).
		Msgf("session %s interrupted (%s): resume it with `openstarry session resume %s`", r.sessionID, reason, r.sessionID)
}

// next decides the dispatcher's next step: the first task to (re)run in
// plan order, or wait, or done, or stuck. A task is ready when every task
// of an earlier phase and every task it depends on is completed; tasks
// that depend on a failed or blocked one become blocked.
func (m *Manager) next(ctx context.Context, r *run) (step, *PlanTask) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tasks, err := m.store.Tasks(ctx, r.projectID)
	if err != nil {
		m.log.Error().Err(err).Msg("reading the plan")
		return stepWait, nil
	}
	before := make([]string, len(tasks))
	for i := range tasks {
		before[i] = tasks[i].Status
	}
	for _, t := range tasks {
		if t.Status == TaskFailed || t.Status == TaskBlocked && t.Error != "" {
			blockDependents(tasks, t.ID)
		}
	}
	for i := range tasks {
		if tasks[i].Status != before[i] {
			if err := m.store.PutTask(ctx, &tasks[i]); err != nil {
				m.log.Error().Err(err).Msg("blocking dependents")
			}
		}
	}
	done, failed, waiting := true, false, false
	for _, t := range tasks {
		switch {
		case t.Status != TaskCompleted:
			done = false
		}
		if t.Status == TaskFailed {
			failed = true
		}
	}
	if done {
		return stepDone, nil
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Status == TaskInProgress {
			if t.State == WaitingForApproval {
				waiting = true
				continue
			}
			return stepRun, t // handed again: the agent answers from its record if it ran it
		}
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Status == TaskPending && ready(tasks, t) {
			return stepRun, t
		}
	}
	for _, t := range tasks {
		if t.Status == TaskPending || t.Status == TaskBlocked && t.Error == "" {
			waiting = true // on an approval, or on an agent that blocked a task
		}
	}
	if failed && !anyInProgress(tasks) {
		return stepStuck, nil
	}
	if waiting || anyInProgress(tasks) {
		return stepWait, nil
	}
	return stepStuck, nil
}

func anyInProgress(tasks []PlanTask) bool {
	for _, t := range tasks {
		if t.Status == TaskInProgress {
			return true
		}
	}
	return false
}

func ready(tasks []PlanTask, t *PlanTask) bool {
	for _, o := range tasks {
		if o.Phase < t.Phase && o.Status != TaskCompleted {
			return false
		}
	}
	for _, d := range t.DependsOn {
		i := indexOf(tasks, d)
		if i < 0 || tasks[i].Status != TaskCompleted {
			return false
		}
	}
	return true
}

// runTask hands one task to its agent and applies the result. It returns
// false when the dispatcher must stop.
func (m *Manager) runTask(ctx context.Context, r *run, agents Agents, t *PlanTask) bool {
	agentID, role := t.AssignedTo, RoleWorker
	if agentID == "" || agentID == agents.Master() {
		agentID, role = agents.Master(), RoleLeader
	}
	now := m.now().UTC()
	m.mu.Lock()
	if t.AgentTaskID == "" {
		t.AgentTaskID = AgentTaskID(r.projectID, r.sessionID, t.ID, t.Attempt)
	}
	if t.Status == TaskPending {
		t.Status = TaskInProgress
	}
	if t.StartedAt == nil {
		t.StartedAt = &now
	}
	t.SessionID = r.sessionID
	err := m.store.PutTask(ctx, t)
	if s, serr := m.store.Session(ctx, r.sessionID); err == nil && serr == nil {
		s.CurrentPhase, s.CurrentTaskID, s.CurrentAgentRole, s.CurrentAgentType = t.Phase, t.ID, role, agentType(agents, agentID)
		s.CurrentAgentID = agentID
		if tasks, terr := m.store.Tasks(ctx, r.projectID); terr == nil {
			s.ContextSummary = contextSummary(tasks, "")
		}
		err = m.store.UpdateSession(ctx, s)
	}
	m.mu.Unlock()
	if err != nil {
		m.log.Error().Err(err).Str("task", t.ID).Msg("starting a task")
		return m.sleep(ctx, r)
	}
	m.saveFiles(ctx, r.projectID, r.sessionID, false)
	at := AgentTask{TaskID: t.AgentTaskID, Type: t.TaskType, Input: withFeedback(t.Input, t.Feedback),
		ProjectID: r.projectID, SessionID: r.sessionID, ResumeContext: r.resume}
	m.log.Info().Str("project", r.projectID).Str("session", r.sessionID).Str("task", t.ID).Str("agent_task", at.TaskID).
		Str("agent", agentID).Msgf("task %s (attempt %d) handed to %s", t.ID, t.Attempt, agentID)
	before := m.artifactState(r.projectID, r.sessionID)
	res, err := agents.Run(ctx, agentID, at)
	switch {
	case ctx.Err() != nil:
		return false
	case errors.Is(err, ErrAgentCrashed):
		m.interrupt(ctx, r, ReasonCrash, err)
		return false
	case err != nil:
		m.log.Warn().Err(err).Str("task", at.TaskID).Str("agent", agentID).Msg("task not handed over; retrying")
		return m.sleep(ctx, r)
	}
	written := changedArtifacts(before, m.artifactState(r.projectID, r.sessionID))
	m.apply(ctx, r, t, agentID, res, written)
	m.refreshSummary(ctx, r, agents)
	return true
}

// maxSummary bounds the context_summary an agent writes.
const maxSummary = 2000

// refreshSummary asks the master for the session's context_summary, once
// a task ended or the session was interrupted: a session_summary task
// whose input is the counting line (contextSummary). A model writes a
// summary from it; the echo brain answers the line itself; a failure or an
// empty answer leaves the line. Bounded in time (SummaryTimeout) and size.
func (m *Manager) refreshSummary(ctx context.Context, r *run, agents Agents) {
	m.mu.Lock()
	tasks, err := m.store.Tasks(ctx, r.projectID)
	m.mu.Unlock()
	if err != nil || ctx.Err() != nil {
		return
	}
	s, err := m.store.Session(ctx, r.sessionID)
	if err != nil {
		return
	}
	fallback := contextSummary(tasks, s.InterruptionReason)
	in, _ := json.Marshal(fallback)
	r.summaries++
	sctx, cancel := context.WithTimeout(ctx, m.o.SummaryTimeout)
	defer cancel()
	res, err := agents.Run(sctx, agents.Master(), AgentTask{
		TaskID: AgentTaskPrefix + r.projectID + ":" + r.sessionID + ":summary:" + itoa(r.summaries), Type: TypeSessionSummary,
		Input: in, ProjectID: r.projectID, SessionID: r.sessionID, ResumeContext: r.resume})
	summary := fallback
	var text string
	if err == nil && res.Status == "done" && json.Unmarshal(res.Output, &text) == nil && strings.TrimSpace(text) != "" {
		summary = clipText(strings.TrimSpace(text), maxSummary)
	} else if err != nil && ctx.Err() == nil {
		m.log.Debug().Err(err).Str("session", r.sessionID).Msg("no context summary from the master; the counting line stays")
	}
	m.mu.Lock()
	s, err = m.store.Session(ctx, r.sessionID)
	if err == nil && s.ContextSummary != summary {
		s.ContextSummary = summary
		err = m.store.UpdateSession(ctx, s)
	}
	m.mu.Unlock()
	if err != nil {
		m.log.Error().Err(err).Str("session", r.sessionID).Msg("recording the context summary")
		return
	}
	m.saveFiles(context.Background(), r.projectID, r.sessionID, false)
}

// clipText cuts s to at most n bytes on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// agentType is the type of an agent (its template's), or its id when the
// Agents do not say.
func agentType(a Agents, id string) string {
	if at, ok := a.(AgentTyper); ok {
		if typ := at.AgentType(id); typ != "" {
			return typ
		}
	}
	return id
}

// apply records an agent's result for the attempt of t handed under
// t.AgentTaskID; written names the artifacts the attempt wrote.
func (m *Manager) apply(ctx context.Context, r *run, t *PlanTask, agentID string, res AgentResult, written []string) {
	m.mu.Lock()
	tasks, err := m.store.Tasks(ctx, r.projectID)
	if err != nil {
		m.mu.Unlock()
		m.log.Error().Err(err).Msg("reading the plan")
		return
	}
	i := indexOf(tasks, t.ID)
	if i < 0 || tasks[i].Attempt != t.Attempt || tasks[i].AgentTaskID != t.AgentTaskID || tasks[i].Status != TaskInProgress {
		m.mu.Unlock()
		return // changed meanwhile (a decision, an update)
	}
	cur := &tasks[i]
	now := m.now().UTC()
	var approval *Approval
	failed := false
	switch res.Status {
	case "done":
		cur.Result, cur.ProgressPercent = res.Output, 100
		a, aerr := m.store.ApprovalFor(ctx, r.projectID, cur.ID, cur.Attempt, false)
		switch {
		case aerr == nil:
			approval = a
			if a.Status == ApprovalPending {
				// Requested by a tool while the task ran: the reviewer
				// sees the result it is asked to decide on.
				if aerr = m.store.SetApprovalResult(ctx, a.ID, res.Output, written); aerr != nil {
					m.log.Error().Err(aerr).Int64("approval", a.ID).Msg("recording the result on the approval")
				}
			}
		case errors.Is(aerr, ErrNotFound) && cur.Approval:
			// The result is stored before the gate opens: whoever sees
			// the pending approval sees what it is asked to decide on.
			if aerr = m.store.PutTask(ctx, cur); aerr != nil {
				m.mu.Unlock()
				m.log.Error().Err(aerr).Str("task", cur.ID).Msg("recording a task's result")
				return
			}
			art, _ := json.Marshal(nonNil(written))
			approval, aerr = m.store.InsertApproval(ctx, &Approval{SessionID: r.sessionID, ProjectID: r.projectID, TaskID: cur.ID,
				Attempt: cur.Attempt, CheckpointType: cur.TaskType, LeaderID: agentID, Status: ApprovalPending, SubmittedAt: now,
				InstructionContent: cur.Name, WorkerInstructions: json.RawMessage(`[]`), Artifacts: art, Result: res.Output})
			if aerr != nil {
				m.log.Error().Err(aerr).Str("task", cur.ID).Msg("recording the approval gate")
			}
		}
		switch {
		case approval == nil || approval.Status == ApprovalApproved:
			cur.Status, cur.CompletedAt = TaskCompleted, &now
		case approval.Status == ApprovalRejected:
			cur.Status, cur.Error, cur.CompletedAt = TaskFailed, "rejected at approval "+itoa(int(approval.ID))+feedbackSuffix(approval.Feedback), &now
			failed = true
		}
	default:
		cur.Status, cur.CompletedAt = TaskFailed, &now
		cur.Error = res.Status
		if res.Error != "" {
			cur.Error += ": " + res.Error
		}
		cur.Result = res.Output
		failed = true
		m.autoApproach(ctx, cur, ApproachFailed, cur.Error, res.Error, nil,
			map[string]any{"type": "agent_result", "agent_id": agentID, "status": res.Status})
	}
	if failed {
		blockDependents(tasks, cur.ID)
	}
	err = m.store.PutTasks(ctx, tasks)
	if s, serr := m.store.Session(ctx, r.sessionID); err == nil && serr == nil {
		s.ContextSummary = contextSummary(tasks, "")
		err = m.store.UpdateSession(ctx, s)
	}
	m.mu.Unlock()
	if err != nil {
		m.log.Error().Err(err).Str("task", cur.ID).Msg("recording a task's result")
		return
	}
	m.saveFiles(ctx, r.projectID, r.sessionID, failed)
	switch {
	case failed:
		m.log.Error().Str("project", r.projectID).Str("task", cur.ID).Str("error", cur.Error).Msgf("task %s failed", cur.ID)
	case cur.Status == TaskCompleted:
		m.log.Info().Str("project", r.projectID).Str("task", cur.ID).Msgf("task %s completed", cur.ID)
	case approval != nil:
		m.log.Info().Str("project", r.projectID).Str("task", cur.ID).Int64("approval", approval.ID).
			Msgf("task %s is %s: approval %d pending", cur.ID, WaitingForApproval, approval.ID)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// autoApproach records what an attempt of t taught, without a model having
// to call approach_record: a failed approach when its agent failed it or a
// reviewer rejected it or asked for a revision, a verified one when a
// reviewer approved it. Its id is derived from the task and the attempt,
// so recording it again replaces it. m.mu is held; the caller writes
// approaches.json (saveFiles with all).
func (m *Manager) autoApproach(ctx context.Context, t *PlanTask, kind, reason, errText string, learnings []string, evidence map[string]any) {
	details, _ := json.Marshal(map[string]any{"task_id": t.ID, "attempt": t.Attempt, "agent_task_id": t.AgentTaskID, "input": t.Input})
	ev, _ := json.Marshal(evidence)
	a := Approach{Category: t.TaskType, Date: m.now().UTC().Format("2006-01-02"),
		Description: fmt.Sprintf("%s (%s), attempt %d", t.Name, t.ID, t.Attempt), Details: details, Evidence: ev, Learnings: learnings}
	yes := true
	if kind == ApproachFailed {
		a.ID = "approach_f_" + t.ID + "_" + itoa(t.Attempt)
		a.FailureReason, a.Error, a.Avoid = reason, errText, &yes
	} else {
		a.ID = "approach_v_" + t.ID + "_" + itoa(t.Attempt)
		a.Reusable = &yes
	}
	if err := m.store.PutApproach(ctx, t.ProjectID, t.SessionID, kind, a, m.now()); err != nil {
		m.log.Error().Err(err).Str("task", t.ID).Msg("recording the attempt's approach")
		return
	}
	m.log.Info().Str("project", t.ProjectID).Str("session", t.SessionID).Str("approach", a.ID).Str("kind", kind).
		Msgf("approach %s recorded (%s) for %s attempt %d", a.ID, kind, t.ID, t.Attempt)
}

// artifactStamp is what tells a file changed: its size and modification time.
type artifactStamp struct {
	size int64
	mod  time.Time
}

// artifactState lists the session's artifacts directory: the path of each
// file relative to the data directory, with its stamp.
func (m *Manager) artifactState(projectID, sessionID string) map[string]artifactStamp {
	dir := m.lay.Artifacts(projectID, sessionID)
	out := map[string]artifactStamp{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		info, ierr := d.Info()
		if ierr != nil {
			return nil
		}
		if rel, rerr := filepath.Rel(m.lay.Data, p); rerr == nil {
			out[filepath.ToSlash(rel)] = artifactStamp{info.Size(), info.ModTime()}
		}
		return nil
	})
	return out
}

// changedArtifacts names the files of after that are new or changed since
// before, sorted: what the attempt that ran between them wrote (a
// session's tasks run one at a time).
func changedArtifacts(before, after map[string]artifactStamp) []string {
	var out []string
	for p, st := range after {
		if b, ok := before[p]; !ok || b != st {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// withFeedback gives a revised task its feedback: appended to a text
// input, as revision_feedback in an object input (except a scripted call
// list, whose shape is fixed).
func withFeedback(input json.RawMessage, feedback string) json.RawMessage {
	if feedback == "" {
		return input
	}
	var s string
	if json.Unmarshal(input, &s) == nil {
		b, _ := json.Marshal(s + "\n\nrevision feedback: " + feedback)
		return b
	}
	var obj map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(input), []byte("{")) && json.Unmarshal(input, &obj) == nil {
		if _, script := obj["call"]; !script {
			obj["revision_feedback"], _ = json.Marshal(feedback)
			b, _ := json.Marshal(obj)
			return b
		}
		return input
	}
	if len(bytes.TrimSpace(input)) == 0 || string(bytes.TrimSpace(input)) == "null" {
		b, _ := json.Marshal("revision feedback: " + feedback)
		return b
	}
	return input
}
