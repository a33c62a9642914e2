package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/jsonclip"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Agents is how the manager hands plan tasks to agents (the daemon
// implements it over the agents' HTTP APIs).
type Agents interface {
	// Master is the master agent's id: the LEADER, and the agent of a task
	// with no assigned_to.
	Master() string
	// Run hands t to agent agentID and returns its result once finished.
	// Sending the same TaskID again must not run it again (agents drop
	// a task id they have seen and answer with its state). Run returns
	// ErrAgentCrashed when the agent's process died while t was in it.
	Run(ctx context.Context, agentID string, t AgentTask) (AgentResult, error)
}

// AgentTyper is what Agents may add: the type of an agent (its template's
// type, such as "code"), which sessions record as current_agent_type.
type AgentTyper interface {
	AgentType(agentID string) string
}

// ErrAgentCrashed is returned by Agents.Run when the agent's process ended
// without a clean stop while it held the task.
var ErrAgentCrashed = plugin.ErrAgentCrashed

// AgentTask is a plan task as an agent receives it.
type AgentTask struct {
	TaskID    string          `json:"task_id"`
	Type      string          `json:"type"`
	Input     json.RawMessage `json:"input"`
	ProjectID string          `json:"project_id"`
	SessionID string          `json:"session_id"`
	// ResumeContext is the context of the resumed session the task belongs
	// to, sent with each of its tasks whichever agent runs it.
	ResumeContext json.RawMessage `json:"resume_context,omitempty"`
}

// AgentResult is an agent's result for an AgentTask.
type AgentResult struct {
	Status string          `json:"status"` // done, failed, unknown_outcome
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// TypeSessionResume is the type of the task that hands a resumed session's
// context to the master: the kernel keeps its input in working_variables
// as resume_context.
const TypeSessionResume = "session_resume"

// TypeSessionSummary is the type of the task that asks the master for a
// session's context_summary (agent.TaskTypeSessionSummary).
const TypeSessionSummary = "session_summary"

// Options configure a Manager.
type Options struct {
	Data string // the data directory
	// OpenStore opens the store in DATA/sessions.db (the plugin
	// sessionstore.sqlite: LookupStore("sqlite")); required.
	OpenStore StoreOpener
	Log       zerolog.Logger
	Now       func() time.Time // default time.Now
	// CheckpointInterval is how often an active session's
	// state_checkpoint.json is written besides the event moments;
	// default 5 minutes.
	CheckpointInterval time.Duration
	// PollInterval paces the dispatcher's retries while an agent is not
	// reachable; default 200ms.
	PollInterval time.Duration
	// SummaryTimeout bounds the wait for the master's context summary;
	// default 60s.
	SummaryTimeout time.Duration
	// OpenBackup opens the store's JSON backup in the data directory
	// (the plugin sessionbackup.files: LookupBackup("files")); required.
	OpenBackup BackupOpener
}

// Manager is session continuity: it owns the store (sessions.db) and the
// project files, dispatches the plans, and answers the API
// (transport/sessionapi serves it over HTTP). Its methods are safe
// for concurrent use.
type Manager struct {
	o      Options
	log    zerolog.Logger
	now    func() time.Time
	lay    Layout
	store  Store
	backup Backup

	agentsMu sync.Mutex
	agents   Agents

	mu   sync.Mutex // guards runs; and serialises read-modify-write of plan rows
	runs map[string]*run
	// cpMu serialises the writes of the checkpoint files: each reads the
	// database and writes the files under it, so that a periodic write that
	// read the session before it ended cannot put that older state over
	// the one its end wrote.
	cpMu sync.Mutex
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// Open opens DATA/sessions.db, migrating it; when it is missing and
// project files exist, it is rebuilt from them. Every project's JSON files
// are then checked: a damaged one is rewritten from the database. Both
// are logged as warnings naming what was rebuilt.
func Open(ctx context.Context, o Options) (*Manager, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 5 * time.Minute
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	if o.SummaryTimeout <= 0 {
		o.SummaryTimeout = time.Minute
	}
	if o.OpenStore == nil {
		return nil, errors.New("sessions: no session store (Options.OpenStore)")
	}
	if o.OpenBackup == nil {
		return nil, errors.New("sessions: no session backup (Options.OpenBackup)")
	}
	m := &Manager{o: o, log: o.Log, now: o.Now, lay: Layout{Data: o.Data}, runs: map[string]*run{}}
	m.life, m.stop = context.WithCancel(context.Background())
	b, err := o.OpenBackup(o.Data)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	m.backup = b
	_, statErr := os.Stat(m.lay.DB())
	missing := errors.Is(statErr, os.ErrNotExist)
	st, err := o.OpenStore(ctx, m.lay.DB())
	if err != nil {
		return nil, err
	}
	m.store = st
	if missing {
		if n, err := m.rebuild(ctx); err != nil {
			st.Close()
			return nil, fmt.Errorf("sessions: rebuilding sessions.db from the project files: %w", err)
		} else if n > 0 {
			m.log.Warn().Int("projects", n).Str("db", m.lay.DB()).
				Msgf("sessions.db was missing: rebuilt %d project(s) from the JSON files", n)
		}
	}
	if err := m.checkFiles(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return m, nil
}

// Store returns the store.
func (m *Manager) Store() Store { return m.store }

// Layout returns the file layout.
func (m *Manager) Layout() Layout { return m.lay }

// SetAgents gives the manager the agents to dispatch to.
func (m *Manager) SetAgents(a Agents) {
	m.agentsMu.Lock()
	m.agents = a
	m.agentsMu.Unlock()
}

func (m *Manager) getAgents() Agents {
	m.agentsMu.Lock()
	defer m.agentsMu.Unlock()
	return m.agents
}

// Close stops every dispatcher. With clean, active sessions end
// interrupted with reason shutdown (resumable); without, they are left
// open for the next boot's scan.
func (m *Manager) Close(clean bool) error {
	m.StopDispatch()
	if clean {
		ctx := context.Background()
		open, err := m.store.OpenSessions(ctx)
		if err == nil {
			for _, s := range open {
				m.endSession(ctx, s.ProjectID, s.ID, SessionInterrupted, ReasonShutdown)
			}
		}
	}
	return m.store.Close()
}

// StopDispatch stops every dispatcher and waits for them, without ending
// their sessions: a clean stop calls it before it stops the agents, so that
// an agent stopping under a task is not taken for a crash; Close(true) then
// records the sessions interrupted with reason shutdown. Idempotent.
func (m *Manager) StopDispatch() {
	m.stop()
	m.wg.Wait()
}

// ScanInterrupted marks every session without ended_at interrupted with
// reason (crash or power_loss, from the boot journal), ended at the last
// moment it was known alive (lastAlive), saves its files, and returns
// them. It runs at boot before any dispatch.
func (m *Manager) ScanInterrupted(ctx context.Context, reason string) ([]Session, error) {
	open, err := m.store.OpenSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("sessions: interruption scan: %w", err)
	}
	for i := range open {
		s := &open[i]
		m.endSessionAt(ctx, s.ProjectID, s.ID, SessionInterrupted, reason, m.lastAlive(ctx, s))
		m.log.Warn().Str("project", s.ProjectID).Str("session", s.ID).Str("reason", reason).
			Msgf("session %s of project %s was interrupted (%s); resume it with `openstarry session resume %s`", s.ID, s.ProjectID, reason, s.ID)
		s.Status, s.InterruptionReason = SessionInterrupted, reason
	}
	return open, nil
}

// ResumableSessions returns the interrupted sessions not yet resumed.
func (m *Manager) ResumableSessions(ctx context.Context) ([]Session, error) {
	return m.store.InterruptedSessions(ctx)
}

// CreateProject stores a project, its first session and its plan, writes
// the files and starts dispatching.
func (m *Manager) CreateProject(ctx context.Context, req *CreateRequest) (*ProjectView, error) {
	now := m.now().UTC()
	p := &Project{ID: NewProjectID(now), Name: req.Name, Description: req.Description, CreatedAt: now}
	sess := &Session{ID: NewSessionID(now), ProjectID: p.ID, Status: SessionActive, StartedAt: now}
	tasks, err := buildPlan(p.ID, sess.ID, req.Tasks)
	if err != nil {
		return nil, err
	}
	sess.CurrentPhase = tasks[0].Phase
	if err := m.store.InsertProject(ctx, p, sess, tasks); err != nil {
		return nil, err
	}
	if err := m.writeProjectFile(p, tasks); err != nil {
		return nil, err
	}
	if err := m.backup.MakeSessionDirs(p.ID, sess.ID); err != nil {
		return nil, err
	}
	m.saveFiles(ctx, p.ID, sess.ID, true)
	m.log.Info().Str("project", p.ID).Str("session", sess.ID).Int("tasks", len(tasks)).
		Msgf("project %s created with %d tasks; session %s started", p.ID, len(tasks), sess.ID)
	m.startRun(p.ID, sess.ID, nil)
	return m.View(ctx, p.ID)
}

// buildPlan turns the submitted tasks into plan rows with generated ids:
// task_p{phase}_{type}_{seq}, seq counting per phase and type.
func buildPlan(projectID, sessionID string, specs []TaskSpec) ([]PlanTask, error) {
	count := map[string]int{}
	tasks := make([]PlanTask, len(specs))
	ids := map[string]bool{}
	for i, s := range specs {
		key := fmt.Sprintf("%d/%s", s.Phase, s.Type)
		count[key]++
		id, err := PlanTaskID(s.Phase, s.Type, count[key])
		if err != nil {
			return nil, fmt.Errorf("%w: tasks[%d]: %v", ErrBadRequest, i, err)
		}
		ids[id] = true
		input := s.Input
		if len(input) == 0 {
			input = json.RawMessage("null")
		}
		name := s.Name
		if name == "" {
			name = id
		}
		tasks[i] = PlanTask{ID: id, SessionID: sessionID, ProjectID: projectID, Seq: i, Phase: s.Phase, TaskType: s.Type,
			Name: name, Input: input, Status: TaskPending, AssignedTo: s.AssignedTo, Approval: s.Approval, DependsOn: []string{}}
	}
	for i, s := range specs {
		for _, d := range s.DependsOn {
			dep := d.ID
			if dep == "" {
				dep = tasks[d.Index].ID
			} else if !ids[dep] {
				return nil, fmt.Errorf("%w: tasks[%d].depends_on: no task %s in this plan", ErrBadRequest, i, dep)
			} else if idx := indexOf(tasks, dep); idx >= i {
				return nil, fmt.Errorf("%w: tasks[%d].depends_on: %s is not an earlier task", ErrBadRequest, i, dep)
			}
			if !contains(tasks[i].DependsOn, dep) {
				tasks[i].DependsOn = append(tasks[i].DependsOn, dep)
			}
		}
	}
	return tasks, nil
}

func indexOf(ts []PlanTask, id string) int {
	for i := range ts {
		if ts[i].ID == id {
			return i
		}
	}
	return -1
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ProjectView is GET /projects/{id}: the project, its plan with progress,
// and its sessions.
type ProjectView struct {
	Project
	Progress ProgressView `json:"progress"`
	Tasks    []PlanTask   `json:"tasks"`
	Sessions []Session    `json:"sessions"`
}

// ProgressView counts a plan's tasks by status.
type ProgressView struct {
	Total     int            `json:"total"`
	Completed int            `json:"completed"`
	Percent   int            `json:"percent"`
	ByStatus  map[string]int `json:"by_status"`
}

// View returns a project with its plan and sessions.
func (m *Manager) View(ctx context.Context, projectID string) (*ProjectView, error) {
	p, err := m.store.Project(ctx, projectID)
	if err != nil {
		return nil, err
	}
	tasks, err := m.store.Tasks(ctx, projectID)
	if err != nil {
		return nil, err
	}
	sessions, err := m.store.Sessions(ctx, projectID)
	if err != nil {
		return nil, err
	}
	master := "master"
	if a := m.getAgents(); a != nil {
		master = a.Master()
	}
	for i := range tasks {
		t := &tasks[i]
		if t.AssignedTo == "" || t.AssignedTo == master {
			t.Role, t.Agent = RoleLeader, master
		} else {
			t.Role, t.Agent = RoleWorker, t.AssignedTo
		}
	}
	return &ProjectView{Project: *p, Tasks: tasks, Sessions: sessions, Progress: progressOf(tasks)}, nil
}

// progressOf is the one measure of a plan's progress, which the API, the
// command line and the web UI show as they get it: the tasks completed out
// of all, and percent = 100 × completed / total, rounded down. A task in
// progress, waiting for its approval, failed or blocked counts as not
// completed, whatever its own progress_percent.
func progressOf(tasks []PlanTask) ProgressView {
	pv := ProgressView{Total: len(tasks), ByStatus: map[string]int{}}
	for _, t := range tasks {
		pv.ByStatus[t.Status]++
		if t.Status == TaskCompleted {
			pv.Completed++
		}
	}
	if len(tasks) > 0 {
		pv.Percent = pv.Completed * 100 / len(tasks)
	}
	return pv
}

// SessionView is GET /projects/{id}/sessions/{sid}: the row, its
// checkpoint as saved, its approvals and approaches.
type SessionView struct {
	Session
	Checkpoint *CheckpointFile     `json:"checkpoint,omitempty"`
	Tasks      []PlanTask          `json:"tasks"`
	Approvals  []Approval          `json:"approvals"`
	Approaches *ApproachesFileJSON `json:"approaches"`
	// ResumeContext is the context a resumed session's tasks carry (its
	// resume_context.json); absent for a session that was not a resume.
	ResumeContext json.RawMessage `json:"resume_context,omitempty"`
}

// SessionDetail returns one session of a project.
func (m *Manager) SessionDetail(ctx context.Context, projectID, sessionID string) (*SessionView, error) {
	s, err := m.Session(ctx, projectID, sessionID)
	if err != nil {
		return nil, err
	}
	v := &SessionView{Session: *s}
	v.Checkpoint, _ = m.readCheckpoint(ctx, projectID, sessionID)
	all, err := m.store.Tasks(ctx, projectID)
	if err != nil {
		return nil, err
	}
	v.Tasks = []PlanTask{}
	for _, t := range all {
		if t.SessionID == sessionID {
			v.Tasks = append(v.Tasks, t)
		}
	}
	aps, err := m.store.Approvals(ctx, projectID, "")
	if err != nil {
		return nil, err
	}
	v.Approvals = []Approval{}
	for _, a := range aps {
		if a.SessionID == sessionID {
			v.Approvals = append(v.Approvals, a)
		}
	}
	if raw, rerr := m.backup.Read(projectID, sessionID, FileResumeContext); rerr == nil && json.Valid(raw) {
		v.ResumeContext = raw
	}
	v.Approaches, err = m.approachesFile(ctx, projectID, sessionID)
	return v, err
}

// Session returns a session and checks it belongs to the project.
func (m *Manager) Session(ctx context.Context, projectID, sessionID string) (*Session, error) {
	if _, err := m.store.Project(ctx, projectID); err != nil {
		return nil, err
	}
	s, err := m.store.Session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if s.ProjectID != projectID {
		return nil, fmt.Errorf("session %s of project %s: %w", sessionID, projectID, ErrNotFound)
	}
	return s, nil
}

// Sessions lists a project's sessions.
func (m *Manager) Sessions(ctx context.Context, projectID string) ([]Session, error) {
	if _, err := m.store.Project(ctx, projectID); err != nil {
		return nil, err
	}
	return m.store.Sessions(ctx, projectID)
}

// Approvals lists a project's approvals ("" for every project), with an
// optional status.
func (m *Manager) Approvals(ctx context.Context, projectID, status string) ([]Approval, error) {
	if projectID != "" {
		if _, err := m.store.Project(ctx, projectID); err != nil {
			return nil, err
		}
	}
	if status != "" && !validApprovalStatus(status) {
		return nil, fmt.Errorf("%w: status %q: want pending, approved, rejected or revision_requested", ErrBadRequest, ClipID(status))
	}
	return m.store.Approvals(ctx, projectID, status)
}

// ApproachesView is GET /projects/{id}/approaches: every approach the
// project's sessions recorded, by kind, each naming its session.
type ApproachesView struct {
	ProjectID string             `json:"project_id"`
	Verified  []RecordedApproach `json:"verified"`
	Failed    []RecordedApproach `json:"failed"`
	Untried   []RecordedApproach `json:"untried"`
}

// Approaches returns a project's approaches.
func (m *Manager) Approaches(ctx context.Context, projectID string) (*ApproachesView, error) {
	if _, err := m.store.Project(ctx, projectID); err != nil {
		return nil, err
	}
	all, err := m.store.Approaches(ctx, projectID, "")
	if err != nil {
		return nil, err
	}
	v := &ApproachesView{ProjectID: projectID, Verified: []RecordedApproach{}, Failed: []RecordedApproach{}, Untried: []RecordedApproach{}}
	for _, a := range all {
		switch a.Kind {
		case ApproachVerified:
			v.Verified = append(v.Verified, a)
		case ApproachFailed:
			v.Failed = append(v.Failed, a)
		default:
			v.Untried = append(v.Untried, a)
		}
	}
	return v, nil
}

// ResumeResult is the answer to a resume: the new session and the context
// handed to the master.
type ResumeResult struct {
	Session       Session         `json:"session"`
	ResumeContext json.RawMessage `json:"resume_context"`
}

// Resume starts a child session of an interrupted one: remaining tasks
// move to it (completed ones are never redone; failed and blocked ones get
// another chance), the resume context is built from the parent's files
// (the database wins over a damaged file), handed to the master, and the
// plan continues. ErrConflict when the session is not interrupted.
func (m *Manager) Resume(ctx context.Context, projectID, sessionID string) (*ResumeResult, error) {
	parent, err := m.Session(ctx, projectID, sessionID)
	if err != nil {
		return nil, err
	}
	if parent.Status != SessionInterrupted {
		return nil, fmt.Errorf("session %s is %s, not interrupted: %w", sessionID, parent.Status, ErrConflict)
	}
	rc, err := m.buildResumeContext(ctx, parent)
	if err != nil {
		return nil, err
	}
	now := m.now().UTC()
	child := &Session{ID: NewSessionID(now), ProjectID: projectID, ParentSessionID: sessionID, Status: SessionActive,
		StartedAt: now, CurrentPhase: parent.CurrentPhase, CurrentTaskID: parent.CurrentTaskID,
		CurrentAgentRole: parent.CurrentAgentRole, CurrentAgentType: parent.CurrentAgentType, CurrentAgentID: parent.CurrentAgentID,
		ContextSummary: "resumed from " + sessionID + ": " + parent.ContextSummary}
	m.mu.Lock()
	moved, err := m.childTasks(ctx, projectID, child.ID)
	if err == nil {
		err = m.store.StartChild(ctx, sessionID, child, moved)
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := m.backup.MakeSessionDirs(projectID, child.ID); err != nil {
		return nil, err
	}
	m.saveFiles(ctx, projectID, sessionID, true)
	m.saveFiles(ctx, projectID, child.ID, true)
	raw, _ := json.Marshal(rc)
	// Bounded, so that every task that carries it stays far below an
	// agent's task size limit; cut so that it stays JSON.
	raw, _ = jsonclip.Clip(raw, MaxResumeContext)
	if err := m.backup.Write(projectID, child.ID, FileResumeContext, append(append([]byte{}, raw...), '\n')); err != nil {
		m.log.Error().Err(err).Str("session", child.ID).Msg("resume_context.json not written; the dispatcher holds the context")
	}
	m.log.Info().Str("project", projectID).Str("session", child.ID).Str("parent", sessionID).
		Int("remaining", len(rc.RemainingTasks)).Msgf("session %s resumed as %s", sessionID, child.ID)
	m.startRun(projectID, child.ID, raw)
	return &ResumeResult{Session: *child, ResumeContext: raw}, nil
}

// childTasks returns the tasks a resumed session takes over: every task
// not completed. A failed or blocked task that had been handed to an agent
// is retried as a new attempt: a new agent task id (the agent runs it
// again rather than answering with the old result), a gate that asks
// again (a new pending approval, not the decision on the old attempt),
// the feedback of a rejection given to the retry. A task in progress keeps
// its attempt and its agent task id: its agent answers with the result of
// the run it already has, and runs it only if it never got it. m.mu is
// held.
func (m *Manager) childTasks(ctx context.Context, projectID, childID string) ([]PlanTask, error) {
	tasks, err := m.store.Tasks(ctx, projectID)
	if err != nil {
		return nil, err
	}
	var out []PlanTask
	for _, t := range tasks {
		if t.Status == TaskCompleted {
			continue
		}
		t.SessionID, t.State = childID, ""
		if t.Status == TaskFailed || t.Status == TaskBlocked {
			if t.StartedAt != nil {
				if a, aerr := m.store.ApprovalFor(ctx, projectID, t.ID, t.Attempt, false); aerr == nil &&
					a.Status == ApprovalRejected && a.Feedback != "" {
					t.Feedback = a.Feedback
				}
				t.Attempt++
				t.AgentTaskID, t.StartedAt = "", nil
			}
			t.Status, t.Error, t.Result, t.ProgressPercent, t.CompletedAt = TaskPending, "", nil, 0, nil
		}
		out = append(out, t)
	}
	return out, nil
}

// MaxResumeContext bounds the resume context a resumed session's tasks
// carry (a model is shown at most 8 KiB of it).
const MaxResumeContext = 64 << 10

// ResumeContext is the context a resumed session starts from (the
// specification's build_resume_context, with the approvals beside it).
type ResumeContext struct {
	ParentSessionID    string            `json:"parent_session_id"`
	InterruptionReason string            `json:"interruption_reason"`
	PreviousState      string            `json:"previous_state"`
	CurrentPhase       int               `json:"current_phase"`
	CurrentTask        *ActiveTask       `json:"current_task"`
	FailedApproaches   []Approach        `json:"failed_approaches"`
	VerifiedApproaches []Approach        `json:"verified_approaches"`
	NextApproaches     []Approach        `json:"next_approaches"`
	RemainingTasks     []TaskRef         `json:"remaining_tasks"`
	Approvals          []ApprovalSummary `json:"approvals"`
}

// ApprovalSummary is an approval as the resume context tells it.
type ApprovalSummary struct {
	ID       int64  `json:"id"`
	TaskID   string `json:"task_id"`
	Status   string `json:"status"`
	Feedback string `json:"feedback,omitempty"`
}

func (m *Manager) buildResumeContext(ctx context.Context, parent *Session) (*ResumeContext, error) {
	cp, err := m.readCheckpoint(ctx, parent.ProjectID, parent.ID)
	if err != nil {
		return nil, err
	}
	// The approaches of the whole chain: what an earlier session learned
	// still holds.
	all, err := m.store.Approaches(ctx, parent.ProjectID, "")
	if err != nil {
		return nil, err
	}
	if _, err := m.approachesFile(ctx, parent.ProjectID, parent.ID); err != nil {
		return nil, err
	}
	rc := &ResumeContext{ParentSessionID: parent.ID, InterruptionReason: parent.InterruptionReason,
		PreviousState: cp.ContextSummary, CurrentPhase: cp.CurrentState.Phase, CurrentTask: cp.CurrentState.ActiveTask,
		FailedApproaches: []Approach{}, VerifiedApproaches: []Approach{}, NextApproaches: []Approach{},
		RemainingTasks: append(append([]TaskRef{}, cp.PendingTasks...), cp.RemainingTasks...), Approvals: []ApprovalSummary{}}
	for _, a := range all {
		switch a.Kind {
		case ApproachFailed:
			rc.FailedApproaches = append(rc.FailedApproaches, a.Approach)
		case ApproachVerified:
			rc.VerifiedApproaches = append(rc.VerifiedApproaches, a.Approach)
		case ApproachUntried:
			if a.Approach.NextToTry != nil && *a.Approach.NextToTry {
				rc.NextApproaches = append(rc.NextApproaches, a.Approach)
			}
		}
	}
	aps, err := m.store.Approvals(ctx, parent.ProjectID, "")
	if err != nil {
		return nil, err
	}
	for _, a := range aps {
		rc.Approvals = append(rc.Approvals, ApprovalSummary{ID: a.ID, TaskID: a.TaskID, Status: a.Status, Feedback: a.Feedback})
	}
	return rc, nil
}

// Decide records a human decision on a pending approval and applies it to
// its task: approved completes it, rejected fails it (its dependents are
// blocked), revision_requested re-runs it with the feedback. The decision
// reaches the session's dispatcher as an event.
func (m *Manager) Decide(ctx context.Context, id int64, status, feedback string) (*Approval, error) {
	return m.DecideBy(ctx, id, status, feedback, "")
}

// DecideBy is Decide with the name of who decided, recorded with the
// decision and its time.
func (m *Manager) DecideBy(ctx context.Context, id int64, status, feedback, by string) (*Approval, error) {
	m.mu.Lock()
	a, err := m.store.Decide(ctx, id, status, feedback, by, m.now())
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	var sessionID string
	if a.TaskID != "" {
		sessionID, err = m.applyDecision(ctx, a)
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.log.Info().Int64("approval", a.ID).Str("project", a.ProjectID).Str("task", a.TaskID).Str("status", a.Status).Str("by", a.DecidedBy).
		Msgf("approval %d of %s: %s", a.ID, a.TaskID, a.Status)
	if sessionID != "" {
		m.saveFiles(ctx, a.ProjectID, sessionID, true)
		m.wake(sessionID)
	}
	return a, nil
}

// applyDecision changes the approval's task; m.mu is held.
func (m *Manager) applyDecision(ctx context.Context, a *Approval) (string, error) {
	tasks, err := m.store.Tasks(ctx, a.ProjectID)
	if err != nil {
		return "", err
	}
	if a.CheckpointType == CheckpointUnknownOutcome {
		// The agent reads the decision and goes on or fails the task;
		// its result completes or fails the plan task.
		return a.SessionID, nil
	}
	i := indexOf(tasks, a.TaskID)
	if i < 0 || tasks[i].Attempt != a.Attempt || tasks[i].Status != TaskInProgress {
		return "", nil // a decision on an older attempt: recorded, nothing to release
	}
	t := &tasks[i]
	now := m.now().UTC()
	var learnings []string
	if a.Feedback != "" {
		learnings = []string{a.Feedback}
	}
	evidence := map[string]any{"type": "human_approval", "approval_id": a.ID, "comment": a.Feedback, "decided_by": a.DecidedBy}
	switch a.Status {
	case ApprovalApproved:
		t.Status, t.ProgressPercent, t.CompletedAt = TaskCompleted, 100, &now
		m.autoApproach(ctx, t, ApproachVerified, "", "", learnings, evidence)
	case ApprovalRejected:
		t.Status, t.Error, t.CompletedAt = TaskFailed, "rejected at approval "+fmt.Sprint(a.ID)+feedbackSuffix(a.Feedback), &now
		blockDependents(tasks, t.ID)
		m.autoApproach(ctx, t, ApproachFailed, "rejected at approval "+fmt.Sprint(a.ID)+feedbackSuffix(a.Feedback), "", learnings, evidence)
	case ApprovalRevision:
		m.autoApproach(ctx, t, ApproachFailed, "revision requested at approval "+fmt.Sprint(a.ID)+feedbackSuffix(a.Feedback), "", learnings, evidence)
		t.Attempt++
		t.Feedback, t.ProgressPercent, t.Result, t.AgentTaskID = a.Feedback, 0, nil, ""
	}
	if err := m.store.PutTasks(ctx, tasks); err != nil {
		return "", err
	}
	return t.SessionID, nil
}

func feedbackSuffix(f string) string {
	if f == "" {
		return ""
	}
	return ": " + f
}

// blockDependents marks every task that depends, directly or not, on id
// blocked.
func blockDependents(tasks []PlanTask, id string) {
	bad := map[string]bool{id: true}
	for changed := true; changed; {
		changed = false
		for i := range tasks {
			t := &tasks[i]
			if t.Status != TaskPending && t.Status != TaskBlocked {
				continue
			}
			for _, d := range t.DependsOn {
				if bad[d] && !bad[t.ID] {
					bad[t.ID], changed = true, true
					t.Status = TaskBlocked
					t.Error = "blocked by " + d
				}
			}
		}
	}
}

// RequestApproval records the approval_request tool's request: the task
// then waits in WAITING_FOR_APPROVAL until a decision. Idempotent: the same
// task and attempt return the same approval.
func (m *Manager) RequestApproval(ctx context.Context, req *ApprovalRequest) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.planTask(ctx, req.ProjectID, req.TaskID)
	if err != nil {
		return nil, err
	}
	a, err := m.store.InsertApproval(ctx, &Approval{SessionID: req.SessionID, ProjectID: req.ProjectID, TaskID: t.ID,
		Attempt: attemptOf(req.TaskID, t), CheckpointType: req.CheckpointType, LeaderID: req.LeaderID, Status: ApprovalPending,
		SubmittedAt: m.now().UTC(), InstructionContent: req.InstructionContent,
		WorkerInstructions: req.WorkerInstructions, Artifacts: req.Artifacts})
	if err != nil {
		return nil, err
	}
	m.log.Info().Int64("approval", a.ID).Str("project", a.ProjectID).Str("task", a.TaskID).
		Msgf("approval %d requested for %s: waiting for a decision", a.ID, a.TaskID)
	return a, nil
}

// RequestUnknownOutcome records the approval an agent raises when a crash
// left the outcome of a non-idempotent tool of its task unknown. The task
// waits (WAITING_FOR_APPROVAL) until an operator decides; the agent reads
// the decision (Approval) and goes on or fails the task. Idempotent: the
// same task and attempt return the same approval.
func (m *Manager) RequestUnknownOutcome(ctx context.Context, req *UnknownOutcomeRequest) (*Approval, error) {
	a, err := m.requestUnknownOutcome(ctx, req)
	if err != nil {
		return nil, err
	}
	// The files hold it too: a sessions.db lost later is rebuilt with it.
	m.saveFiles(ctx, a.ProjectID, a.SessionID, false)
	return a, nil
}

func (m *Manager) requestUnknownOutcome(ctx context.Context, req *UnknownOutcomeRequest) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.planTask(ctx, req.ProjectID, req.TaskID)
	if err != nil {
		return nil, err
	}
	args := string(req.Args)
	if args == "" {
		args = "{}"
	}
	instr, _ := json.Marshal([]map[string]any{{"tool": req.Tool, "args": json.RawMessage(args)}})
	a, err := m.store.InsertApproval(ctx, &Approval{SessionID: req.SessionID, ProjectID: req.ProjectID, TaskID: t.ID,
		Attempt: attemptOf(req.TaskID, t), CheckpointType: CheckpointUnknownOutcome, LeaderID: req.LeaderID, Status: ApprovalPending,
		SubmittedAt: m.now().UTC(),
		InstructionContent: fmt.Sprintf("agent %s stopped (crash or power loss) while %s of task %s was running: it may or may not "+
			"have taken effect, and it is not run again by itself. Check, then approve to let the agent go on (your feedback is "+
			"what it is told), or reject to fail the task.", req.LeaderID, req.Tool, req.TaskID),
		WorkerInstructions: instr, Artifacts: json.RawMessage(`[]`)})
	if err != nil {
		return nil, err
	}
	m.log.Warn().Int64("approval", a.ID).Str("project", a.ProjectID).Str("task", a.TaskID).Str("agent", req.LeaderID).Str("tool", req.Tool).
		Msgf("approval %d: the outcome of %s in %s is unknown after a crash; waiting for a decision", a.ID, req.Tool, a.TaskID)
	return a, nil
}

// attemptOf is the attempt an agent task id was handed for (the task's
// current attempt for an id of the older form).
func attemptOf(agentTaskID string, t *PlanTask) int {
	if _, _, _, n, ok := ParseAgentTaskID(agentTaskID); ok {
		return n
	}
	return t.Attempt
}

// planTask finds the plan task of an agent task id in a project.
func (m *Manager) planTask(ctx context.Context, projectID, agentTaskID string) (*PlanTask, error) {
	id := PlanTaskOf(agentTaskID)
	tasks, err := m.store.Tasks(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if i := indexOf(tasks, id); i >= 0 {
		return &tasks[i], nil
	}
	if _, err := m.store.Project(ctx, projectID); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("task %s of project %s: %w", id, projectID, ErrNotFound)
}

// RecordApproach records an approach (approach_record): database, then
// approaches.json. Idempotent: an approach without an id gets one derived
// from its kind, category and description.
func (m *Manager) RecordApproach(ctx context.Context, req *ApproachRecord) (*Approach, error) {
	if _, err := m.Session(ctx, req.ProjectID, req.SessionID); err != nil {
		return nil, err
	}
	a := req.Approach
	if a.ID == "" {
		h := sha256.Sum256([]byte(req.Kind + "\x00" + a.Category + "\x00" + a.Description))
		prefix := map[string]string{ApproachVerified: "approach_", ApproachFailed: "approach_f", ApproachUntried: "approach_u"}[req.Kind]
		a.ID = prefix + hex.EncodeToString(h[:5])
	}
	if a.Date == "" && req.Kind != ApproachUntried {
		a.Date = m.now().UTC().Format("2006-01-02")
	}
	if err := m.store.PutApproach(ctx, req.ProjectID, req.SessionID, req.Kind, a, m.now()); err != nil {
		return nil, err
	}
	if err := m.writeApproaches(ctx, req.ProjectID, req.SessionID); err != nil {
		m.log.Error().Err(err).Str("session", req.SessionID).Msg("approaches.json not written; the database holds the approach")
	}
	m.log.Info().Str("project", req.ProjectID).Str("session", req.SessionID).Str("approach", a.ID).Str("kind", req.Kind).
		Msgf("approach %s recorded (%s)", a.ID, req.Kind)
	return &a, nil
}

// UpdateTask applies task_update: progress, status, dependencies, or a new
// task added to the plan.
func (m *Manager) UpdateTask(ctx context.Context, req *TaskUpdate) (*PlanTask, error) {
	m.mu.Lock()
	tasks, err := m.store.Tasks(ctx, req.ProjectID)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	var t *PlanTask
	if req.Add != nil {
		t, err = m.addTask(ctx, req, tasks)
	} else {
		t, err = m.changeTask(ctx, req, tasks)
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.saveFiles(ctx, req.ProjectID, req.SessionID, false)
	m.wake(req.SessionID)
	return t, nil
}

func (m *Manager) changeTask(ctx context.Context, req *TaskUpdate, tasks []PlanTask) (*PlanTask, error) {
	i := indexOf(tasks, PlanTaskOf(req.TaskID))
	if i < 0 {
		return nil, fmt.Errorf("task %s of project %s: %w", req.TaskID, req.ProjectID, ErrNotFound)
	}
	t := &tasks[i]
	if t.Status == TaskCompleted && (req.Status != "" || req.DependsOn != nil) {
		return nil, fmt.Errorf("task %s is completed: %w", t.ID, ErrConflict)
	}
	if req.ProgressPercent != nil {
		t.ProgressPercent = *req.ProgressPercent
	}
	if req.Status != "" {
		t.Status = req.Status
	}
	if req.DependsOn != nil {
		for _, d := range *req.DependsOn {
			if d == t.ID || indexOf(tasks, d) < 0 {
				return nil, fmt.Errorf("%w: depends_on %s: not another task of this plan", ErrBadRequest, d)
			}
		}
		t.DependsOn = append([]string{}, *req.DependsOn...)
		if cyclic(tasks) {
			return nil, fmt.Errorf("%w: depends_on would make a cycle", ErrBadRequest)
		}
	}
	if err := m.store.PutTask(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

func (m *Manager) addTask(ctx context.Context, req *TaskUpdate, tasks []PlanTask) (*PlanTask, error) {
	s := req.Add
	if s.Phase < 1 || !taskTypeRe().MatchString(s.Type) {
		return nil, fmt.Errorf("%w: add: phase 1-999 and a type of [a-z][a-z0-9]* are required", ErrBadRequest)
	}
	seq, maxSeq := 0, 0
	for _, t := range tasks {
		if t.Phase == s.Phase && t.TaskType == s.Type {
			seq++
		}
		if t.Seq >= maxSeq {
			maxSeq = t.Seq + 1
		}
	}
	id, err := PlanTaskID(s.Phase, s.Type, seq+1)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	// The same request again (an idempotent retry) finds the task it
	// added: same phase, type, name and input.
	for i := range tasks {
		if tasks[i].Phase == s.Phase && tasks[i].TaskType == s.Type && tasks[i].Name == s.Name && string(tasks[i].Input) == string(s.Input) && s.Name != "" {
			return &tasks[i], nil
		}
	}
	t := PlanTask{ID: id, SessionID: req.SessionID, ProjectID: req.ProjectID, Seq: maxSeq, Phase: s.Phase, TaskType: s.Type,
		Name: s.Name, Input: s.Input, Status: TaskPending, AssignedTo: s.AssignedTo, Approval: s.Approval, DependsOn: []string{}}
	if t.Name == "" {
		t.Name = id
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("null")
	}
	for _, d := range s.DependsOn {
		dep := d.ID
		if dep == "" || indexOf(tasks, dep) < 0 {
			return nil, fmt.Errorf("%w: add: depends_on takes task ids of this plan", ErrBadRequest)
		}
		t.DependsOn = append(t.DependsOn, dep)
	}
	if err := m.store.PutTask(ctx, &t); err != nil {
		return nil, err
	}
	m.log.Info().Str("project", req.ProjectID).Str("task", t.ID).Msgf("task %s added to the plan by an agent", t.ID)
	return &t, nil
}

func cyclic(tasks []PlanTask) bool {
	deps := map[string][]string{}
	for _, t := range tasks {
		deps[t.ID] = t.DependsOn
	}
	state := map[string]int{}
	var visit func(string) bool
	visit = func(id string) bool {
		switch state[id] {
		case 1:
			return true
		case 2:
			return false
		}
		state[id] = 1
		for _, d := range deps[id] {
			if visit(d) {
				return true
			}
		}
		state[id] = 2
		return false
	}
	ids := make([]string, 0, len(deps))
	for id := range deps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if visit(id) {
			return true
		}
	}
	return false
}

// contextSummary describes where a plan stands, for context_summary.
func contextSummary(tasks []PlanTask, reason string) string {
	pv := progressOf(tasks)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d tasks completed", pv.Completed, pv.Total)
	var last, current string
	for _, t := range tasks {
		if t.Status == TaskCompleted {
			last = t.ID
		}
		if t.Status == TaskInProgress && current == "" {
			current = t.ID
			if t.State != "" {
				current += " (" + t.State + ")"
			}
		}
	}
	if last != "" {
		b.WriteString("; last completed " + last)
	}
	if current != "" {
		b.WriteString("; in progress " + current)
	}
	if n := pv.ByStatus[TaskFailed]; n > 0 {
		fmt.Fprintf(&b, "; %d failed", n)
	}
	if n := pv.ByStatus[TaskBlocked]; n > 0 {
		fmt.Fprintf(&b, "; %d blocked", n)
	}
	if reason != "" {
		b.WriteString("; interrupted: " + reason)
	}
	return b.String()
}

// CheckDB reads sessions.db back from the disk (Store.Check): the daemon's
// scrub.
func (m *Manager) CheckDB(ctx context.Context) (damage, repaired []string, checked int64, err error) {
	return m.store.Check(ctx)
}
