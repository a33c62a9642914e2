package sessionsql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
)

func init() {
	session.RegisterStore("sqlite", "session continuity in DATA/sessions.db: SQLite (pure Go, WAL, synchronous=FULL)",
		func(ctx context.Context, path string) (session.Store, error) {
			st, err := OpenStore(ctx, path)
			if err != nil {
				return nil, err
			}
			return st, nil
		})
}

// migrations are applied in order; PRAGMA user_version is the number
// applied. Never edit one that shipped: append.
var migrations = []string{
	`CREATE TABLE projects (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		description TEXT NOT NULL DEFAULT '',
		created_at TIMESTAMP NOT NULL
	);
	CREATE TABLE sessions (
		id TEXT PRIMARY KEY,
		project_id TEXT NOT NULL,
		parent_session_id TEXT,
		started_at TIMESTAMP NOT NULL,
		ended_at TIMESTAMP,
		interruption_reason TEXT,
		current_phase INTEGER,
		current_agent_role TEXT,
		current_agent_type TEXT,
		current_task_id TEXT,
		context_summary TEXT,
		status TEXT NOT NULL DEFAULT 'active',
		FOREIGN KEY (project_id) REFERENCES projects(id)
	);
	CREATE INDEX sessions_project ON sessions(project_id, started_at);
	CREATE TABLE tasks (
		id TEXT NOT NULL,
		session_id TEXT NOT NULL,
		project_id TEXT NOT NULL,
		phase INTEGER NOT NULL,
		task_type TEXT NOT NULL,
		status TEXT NOT NULL CHECK (status IN ('pending','in_progress','completed','failed','blocked')),
		progress_percent INTEGER DEFAULT 0,
		assigned_to TEXT,
		depends_on JSON,
		started_at TIMESTAMP,
		completed_at TIMESTAMP,
		result JSON,
		seq INTEGER NOT NULL,
		name TEXT NOT NULL DEFAULT '',
		input JSON,
		approval INTEGER NOT NULL DEFAULT 0,
		attempt INTEGER NOT NULL DEFAULT 0,
		feedback TEXT,
		error TEXT,
		PRIMARY KEY (project_id, id),
		FOREIGN KEY (session_id) REFERENCES sessions(id),
		FOREIGN KEY (project_id) REFERENCES projects(id)
	);
	CREATE TABLE human_approvals (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		session_id TEXT NOT NULL,
		project_id TEXT NOT NULL,
		checkpoint_type TEXT NOT NULL,
		leader_id TEXT NOT NULL,
		status TEXT NOT NULL CHECK (status IN ('pending','approved','rejected','revision_requested')),
		submitted_at TIMESTAMP NOT NULL,
		resolved_at TIMESTAMP,
		feedback TEXT,
		instruction_content TEXT,
		worker_instructions JSON,
		artifacts JSON,
		revision_history JSON,
		task_id TEXT NOT NULL DEFAULT '',
		attempt INTEGER NOT NULL DEFAULT 0,
		FOREIGN KEY (session_id) REFERENCES sessions(id)
	);
	CREATE INDEX approvals_project ON human_approvals(project_id, id);
	CREATE UNIQUE INDEX approvals_task ON human_approvals(project_id, task_id, attempt) WHERE task_id != '';
	CREATE TABLE approaches (
		session_id TEXT NOT NULL,
		project_id TEXT NOT NULL,
		id TEXT NOT NULL,
		kind TEXT NOT NULL CHECK (kind IN ('verified','failed','untried')),
		body JSON NOT NULL,
		recorded_at TIMESTAMP NOT NULL,
		PRIMARY KEY (session_id, id),
		FOREIGN KEY (session_id) REFERENCES sessions(id)
	);`,
	// Who decided an approval: the name the person gave (web UI, CLI
	// --by, API decided_by), or the address the decision came from.
	`ALTER TABLE human_approvals ADD COLUMN decided_by TEXT;`,
	// A task attempt may hold two approvals: its gate (or the
	// approval_request tool's), and the decision on an unknown outcome.
	`DROP INDEX approvals_task;
	CREATE UNIQUE INDEX approvals_task ON human_approvals(project_id, task_id, attempt, checkpoint_type = 'unknown_outcome') WHERE task_id != '';`,
	// The id an attempt was handed to its agent under (plan:…), kept while
	// the attempt lasts (a task an older version handed keeps the id it
	// was given then: id, id.r1, …); the result an approval is asked to
	// decide on; the id of the agent a session's current task runs on.
	`ALTER TABLE tasks ADD COLUMN agent_task_id TEXT;
	ALTER TABLE human_approvals ADD COLUMN result JSON;
	ALTER TABLE sessions ADD COLUMN current_agent_id TEXT;
	UPDATE tasks SET agent_task_id = CASE WHEN attempt = 0 THEN id ELSE id || '.r' || attempt END
		WHERE status = 'in_progress' AND started_at IS NOT NULL;`,
}

// Store is DATA/sessions.db (session.Store). Every method is safe for concurrent use; each
// change is one transaction, durable when the method returns.
type Store struct {
	db   *sql.DB
	path string
}

// Check reads sessions.db and its write-ahead log back from the disk
// (the daemon's scrub, sqlitedb.Check): the damaged parts found, each
// naming its file, those repaired, and the bytes checked.
func (s *Store) Check(ctx context.Context) (damage, repaired []string, checked int64, err error) {
	return sqlitedb.Check(ctx, s.db, s.path)
}

// OpenStore opens (creating it if needed, 0600) and migrates the database.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	db, _, err := sqlitedb.Open(abs, sqlitedb.Options{ForeignKeys: true, MaxOpenConns: 4})
	if err != nil {
		return nil, fmt.Errorf("sessions.db %s: %w", abs, err)
	}
	steps := make([][]string, len(migrations))
	for i, m := range migrations {
		steps[i] = []string{m}
	}
	if err := sqlitedb.Migrate(ctx, db, steps); err != nil {
		db.Close()
		return nil, fmt.Errorf("sessions.db %s: %w", abs, err)
	}
	return &Store{db: db, path: abs}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// DB is the database, for tests that edit it behind the store's back.
func (s *Store) DB() *sql.DB { return s.db }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// SchemaVersion returns PRAGMA user_version.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

// times are stored as RFC 3339 text in UTC.
func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func tsp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ts(*t)
}

func parseTS(s sql.NullString) *time.Time {
	if !s.Valid || s.String == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s.String)
	if err != nil {
		return nil
	}
	return &t
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func rawOrNull(r json.RawMessage) any {
	if len(r) == 0 {
		return nil
	}
	return string(r)
}

// --- projects

// InsertProject adds a project with its first session and its plan, in one
// transaction.
func (s *Store) InsertProject(ctx context.Context, p *session.Project, sess *session.Session, tasks []session.PlanTask) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO projects(id, name, description, created_at) VALUES (?,?,?,?)`,
		p.ID, p.Name, p.Description, ts(p.CreatedAt)); err != nil {
		return fmt.Errorf("insert project %s: %w", p.ID, err)
	}
	if sess != nil {
		if err := insertSession(ctx, tx, sess); err != nil {
			return err
		}
	}
	for i := range tasks {
		if err := putTask(ctx, tx, &tasks[i]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

const projectCols = `p.id, p.name, p.description, p.created_at,
	COALESCE((SELECT id FROM sessions WHERE project_id = p.id ORDER BY started_at DESC, rowid DESC LIMIT 1), ''),
	COALESCE((SELECT status FROM sessions WHERE project_id = p.id ORDER BY started_at DESC, rowid DESC LIMIT 1), '')`

func scanProject(sc interface{ Scan(...any) error }) (session.Project, error) {
	var p session.Project
	var created string
	err := sc.Scan(&p.ID, &p.Name, &p.Description, &created, &p.SessionID, &p.Status)
	if t := parseTS(sql.NullString{String: created, Valid: true}); t != nil {
		p.CreatedAt = *t
	}
	return p, err
}

// Projects lists every project, newest first.
func (s *Store) Projects(ctx context.Context) ([]session.Project, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+projectCols+` FROM projects p ORDER BY p.created_at DESC, p.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []session.Project{}
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Project returns one project.
func (s *Store) Project(ctx context.Context, id string) (*session.Project, error) {
	p, err := scanProject(s.db.QueryRowContext(ctx, `SELECT `+projectCols+` FROM projects p WHERE p.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("project %s: %w", id, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// --- sessions

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// InsertSession adds a session row as it is (a rebuild from the files).
func (s *Store) InsertSession(ctx context.Context, x *session.Session) error {
	return insertSession(ctx, s.db, x)
}

func insertSession(ctx context.Context, tx execer, x *session.Session) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO sessions(id, project_id, parent_session_id, started_at, ended_at,
		interruption_reason, current_phase, current_agent_role, current_agent_type, current_task_id, context_summary, status,
		current_agent_id)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		x.ID, x.ProjectID, nullStr(x.ParentSessionID), ts(x.StartedAt), tsp(x.EndedAt), nullStr(x.InterruptionReason),
		x.CurrentPhase, nullStr(x.CurrentAgentRole), nullStr(x.CurrentAgentType), nullStr(x.CurrentTaskID),
		nullStr(x.ContextSummary), x.Status, nullStr(x.CurrentAgentID))
	if err != nil {
		return fmt.Errorf("insert session %s: %w", x.ID, err)
	}
	return nil
}

// UpdateSession writes every column of a session.
func (s *Store) UpdateSession(ctx context.Context, x *session.Session) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET ended_at=?, interruption_reason=?, current_phase=?,
		current_agent_role=?, current_agent_type=?, current_task_id=?, context_summary=?, status=?, current_agent_id=? WHERE id=?`,
		tsp(x.EndedAt), nullStr(x.InterruptionReason), x.CurrentPhase, nullStr(x.CurrentAgentRole),
		nullStr(x.CurrentAgentType), nullStr(x.CurrentTaskID), nullStr(x.ContextSummary), x.Status, nullStr(x.CurrentAgentID), x.ID)
	if err != nil {
		return fmt.Errorf("update session %s: %w", x.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("session %s: %w", x.ID, session.ErrNotFound)
	}
	return nil
}

const sessionCols = `id, project_id, COALESCE(parent_session_id,''), started_at, ended_at, COALESCE(interruption_reason,''),
	COALESCE(current_phase,0), COALESCE(current_agent_role,''), COALESCE(current_agent_type,''),
	COALESCE(current_task_id,''), COALESCE(context_summary,''), status, COALESCE(current_agent_id,'')`

func scanSession(sc interface{ Scan(...any) error }) (session.Session, error) {
	var x session.Session
	var started string
	var ended sql.NullString
	err := sc.Scan(&x.ID, &x.ProjectID, &x.ParentSessionID, &started, &ended, &x.InterruptionReason,
		&x.CurrentPhase, &x.CurrentAgentRole, &x.CurrentAgentType, &x.CurrentTaskID, &x.ContextSummary, &x.Status, &x.CurrentAgentID)
	if t := parseTS(sql.NullString{String: started, Valid: true}); t != nil {
		x.StartedAt = *t
	}
	x.EndedAt = parseTS(ended)
	return x, err
}

// Sessions lists a project's sessions, oldest first.
func (s *Store) Sessions(ctx context.Context, projectID string) ([]session.Session, error) {
	return s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions WHERE project_id = ? ORDER BY started_at, rowid`, projectID)
}

// OpenSessions lists the sessions with no ended_at, of every project.
func (s *Store) OpenSessions(ctx context.Context) ([]session.Session, error) {
	return s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions WHERE ended_at IS NULL ORDER BY started_at, rowid`)
}

// InterruptedSessions lists every session whose status is interrupted.
func (s *Store) InterruptedSessions(ctx context.Context) ([]session.Session, error) {
	return s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions WHERE status = 'interrupted' ORDER BY started_at, rowid`)
}

func (s *Store) querySessions(ctx context.Context, q string, args ...any) ([]session.Session, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []session.Session{}
	for rows.Next() {
		x, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// Session returns one session.
func (s *Store) Session(ctx context.Context, id string) (*session.Session, error) {
	x, err := scanSession(s.db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session %s: %w", id, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// StartChild marks parent resumed and inserts child, and writes the tasks
// it takes over (moved to it, retried ones as new attempts), in one
// transaction. session.ErrConflict when the parent is not interrupted (a
// concurrent resume took it).
func (s *Store) StartChild(ctx context.Context, parentID string, child *session.Session, tasks []session.PlanTask) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE sessions SET status = 'resumed' WHERE id = ? AND status = 'interrupted'`, parentID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("session %s is not interrupted: %w", parentID, session.ErrConflict)
	}
	if err := insertSession(ctx, tx, child); err != nil {
		return err
	}
	for i := range tasks {
		if err := putTask(ctx, tx, &tasks[i]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// --- tasks

func putTask(ctx context.Context, tx execer, t *session.PlanTask) error {
	deps := t.DependsOn
	if deps == nil {
		deps = []string{}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO tasks(id, session_id, project_id, phase, task_type, status, progress_percent,
		assigned_to, depends_on, started_at, completed_at, result, seq, name, input, approval, attempt, feedback, error, agent_task_id)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT(project_id, id) DO UPDATE SET session_id=excluded.session_id, phase=excluded.phase,
		task_type=excluded.task_type, status=excluded.status, progress_percent=excluded.progress_percent,
		assigned_to=excluded.assigned_to, depends_on=excluded.depends_on, started_at=excluded.started_at,
		completed_at=excluded.completed_at, result=excluded.result, seq=excluded.seq, name=excluded.name,
		input=excluded.input, approval=excluded.approval, attempt=excluded.attempt, feedback=excluded.feedback,
		error=excluded.error, agent_task_id=excluded.agent_task_id`,
		t.ID, t.SessionID, t.ProjectID, t.Phase, t.TaskType, t.Status, t.ProgressPercent, nullStr(t.AssignedTo),
		jsonText(deps), tsp(t.StartedAt), tsp(t.CompletedAt), rawOrNull(t.Result), t.Seq, t.Name, rawOrNull(t.Input),
		t.Approval, t.Attempt, nullStr(t.Feedback), nullStr(t.Error), nullStr(t.AgentTaskID))
	if err != nil {
		return fmt.Errorf("write task %s: %w", t.ID, err)
	}
	return nil
}

// PutTask inserts or replaces one task.
func (s *Store) PutTask(ctx context.Context, t *session.PlanTask) error { return putTask(ctx, s.db, t) }

// PutTasks writes several tasks in one transaction.
func (s *Store) PutTasks(ctx context.Context, ts []session.PlanTask) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i := range ts {
		if err := putTask(ctx, tx, &ts[i]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Tasks returns a project's plan in plan order, each with its approval
// state.
func (s *Store) Tasks(ctx context.Context, projectID string) ([]session.PlanTask, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT t.id, t.session_id, t.project_id, t.seq, t.phase, t.task_type, t.name,
		COALESCE(t.input,''), t.status, COALESCE(t.progress_percent,0), COALESCE(t.assigned_to,''), COALESCE(t.depends_on,'[]'),
		t.approval, t.attempt, COALESCE(t.feedback,''), t.started_at, t.completed_at, COALESCE(t.result,''), COALESCE(t.error,''),
		COALESCE(t.agent_task_id,''),
		EXISTS (SELECT 1 FROM human_approvals a WHERE a.project_id = t.project_id AND a.task_id = t.id
			AND a.attempt = t.attempt AND a.status = 'pending')
		FROM tasks t WHERE t.project_id = ? ORDER BY t.phase, t.seq`, projectID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []session.PlanTask{}
	for rows.Next() {
		var t session.PlanTask
		var input, deps, result string
		var started, completed sql.NullString
		var waiting bool
		if err := rows.Scan(&t.ID, &t.SessionID, &t.ProjectID, &t.Seq, &t.Phase, &t.TaskType, &t.Name, &input, &t.Status,
			&t.ProgressPercent, &t.AssignedTo, &deps, &t.Approval, &t.Attempt, &t.Feedback, &started, &completed,
			&result, &t.Error, &t.AgentTaskID, &waiting); err != nil {
			return nil, err
		}
		if input != "" {
			t.Input = json.RawMessage(input)
		}
		if result != "" {
			t.Result = json.RawMessage(result)
		}
		if err := json.Unmarshal([]byte(deps), &t.DependsOn); err != nil || t.DependsOn == nil {
			t.DependsOn = []string{}
		}
		t.StartedAt, t.CompletedAt = parseTS(started), parseTS(completed)
		if waiting && t.Status == session.TaskInProgress {
			t.State = session.WaitingForApproval
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// --- approvals

// InsertApproval adds an approval, or returns the existing one for the
// same task and attempt (the request is idempotent). The approval of a
// task's later attempt (after a revision, or a retry by a resumed session)
// starts its revision_history with that of the task's previous approval:
// every earlier round, oldest first.
func (s *Store) InsertApproval(ctx context.Context, a *session.Approval) (*session.Approval, error) {
	unknown := a.CheckpointType == session.CheckpointUnknownOutcome
	if a.TaskID != "" {
		if got, err := s.ApprovalFor(ctx, a.ProjectID, a.TaskID, a.Attempt, unknown); err == nil {
			return got, nil
		} else if !errors.Is(err, session.ErrNotFound) {
			return nil, err
		}
	}
	hist := a.RevisionHistory
	if hist == nil {
		hist = []session.Revision{}
		if a.TaskID != "" && !unknown && a.ID == 0 {
			prev, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM human_approvals
				WHERE project_id = ? AND task_id = ? AND attempt < ? AND checkpoint_type != 'unknown_outcome'
				ORDER BY attempt DESC, id DESC LIMIT 1`, a.ProjectID, a.TaskID, a.Attempt))
			switch {
			case err == nil:
				hist = prev.RevisionHistory
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
		}
	}
	q := `INSERT INTO human_approvals(session_id, project_id, checkpoint_type, leader_id, status, submitted_at, resolved_at,
		feedback, instruction_content, worker_instructions, artifacts, revision_history, task_id, attempt, decided_by, result)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	args := []any{a.SessionID, a.ProjectID, a.CheckpointType, a.LeaderID, a.Status, ts(a.SubmittedAt), tsp(a.ResolvedAt),
		nullStr(a.Feedback), nullStr(a.InstructionContent), jsonArray(a.WorkerInstructions), jsonArray(a.Artifacts),
		jsonText(hist), a.TaskID, a.Attempt, nullStr(a.DecidedBy), rawOrNull(a.Result)}
	if a.ID > 0 { // a rebuild keeps the ids the files name
		q = strings.Replace(q, "(session_id,", "(id, session_id,", 1)
		q = strings.Replace(q, "VALUES (?,", "VALUES (?,?,", 1)
		args = append([]any{a.ID}, args...)
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("insert approval: %w", err)
	}
	id, _ := res.LastInsertId()
	return s.Approval(ctx, id)
}

// SetApprovalResult gives a pending approval the result of the attempt it
// is about and the artifacts that attempt wrote (added to those it names).
func (s *Store) SetApprovalResult(ctx context.Context, id int64, result json.RawMessage, artifacts []string) error {
	a, err := s.Approval(ctx, id)
	if err != nil {
		return err
	}
	var have []string
	_ = json.Unmarshal(a.Artifacts, &have)
	for _, p := range artifacts {
		if !slices.Contains(have, p) {
			have = append(have, p)
		}
	}
	if have == nil {
		have = []string{}
	}
	_, err = s.db.ExecContext(ctx, `UPDATE human_approvals SET result = ?, artifacts = ? WHERE id = ? AND status = 'pending'`,
		rawOrNull(result), jsonText(have), id)
	return err
}

func jsonArray(r json.RawMessage) string {
	if len(r) == 0 || string(r) == "null" {
		return "[]"
	}
	return string(r)
}

const approvalCols = `id, session_id, project_id, task_id, attempt, checkpoint_type, leader_id, status, submitted_at,
	resolved_at, COALESCE(feedback,''), COALESCE(instruction_content,''), COALESCE(worker_instructions,'[]'),
	COALESCE(artifacts,'[]'), COALESCE(revision_history,'[]'), COALESCE(decided_by,''), COALESCE(result,'')`

func scanApproval(sc interface{ Scan(...any) error }) (session.Approval, error) {
	var a session.Approval
	var submitted, wi, art, hist, result string
	var resolved sql.NullString
	err := sc.Scan(&a.ID, &a.SessionID, &a.ProjectID, &a.TaskID, &a.Attempt, &a.CheckpointType, &a.LeaderID, &a.Status,
		&submitted, &resolved, &a.Feedback, &a.InstructionContent, &wi, &art, &hist, &a.DecidedBy, &result)
	if result != "" {
		a.Result = json.RawMessage(result)
	}
	if t := parseTS(sql.NullString{String: submitted, Valid: true}); t != nil {
		a.SubmittedAt = *t
	}
	a.ResolvedAt = parseTS(resolved)
	a.WorkerInstructions, a.Artifacts = json.RawMessage(wi), json.RawMessage(art)
	if json.Unmarshal([]byte(hist), &a.RevisionHistory) != nil || a.RevisionHistory == nil {
		a.RevisionHistory = []session.Revision{}
	}
	return a, err
}

// Approval returns one approval.
func (s *Store) Approval(ctx context.Context, id int64) (*session.Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM human_approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval %d: %w", id, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (s *Store) ApprovalFor(ctx context.Context, projectID, taskID string, attempt int, unknown bool) (*session.Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM human_approvals
		WHERE project_id = ? AND task_id = ? AND attempt = ? AND (checkpoint_type = 'unknown_outcome') = ?`,
		projectID, taskID, attempt, unknown))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval of %s attempt %d: %w", taskID, attempt, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// Approvals lists approvals, oldest first: of a project when projectID is
// set, with status when status is set.
func (s *Store) Approvals(ctx context.Context, projectID, status string) ([]session.Approval, error) {
	q := `SELECT ` + approvalCols + ` FROM human_approvals WHERE 1=1`
	var args []any
	if projectID != "" {
		q += ` AND project_id = ?`
		args = append(args, projectID)
	}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []session.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Decide resolves a pending approval: status, feedback, who decided,
// resolved_at, and an entry in revision_history. session.ErrConflict when it is
// not pending.
func (s *Store) Decide(ctx context.Context, id int64, status, feedback, by string, at time.Time) (*session.Approval, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM human_approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval %d: %w", id, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if a.Status != session.ApprovalPending {
		return nil, fmt.Errorf("approval %d is already %s: %w", id, a.Status, session.ErrConflict)
	}
	a.RevisionHistory = append(a.RevisionHistory, session.Revision{At: at.UTC(), Status: status, Feedback: feedback, Attempt: a.Attempt, By: by,
		ApprovalID: a.ID, Result: a.Result})
	if _, err := tx.ExecContext(ctx, `UPDATE human_approvals SET status=?, feedback=?, resolved_at=?, revision_history=?, decided_by=? WHERE id=?`,
		status, nullStr(feedback), ts(at), jsonText(a.RevisionHistory), nullStr(by), id); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return s.Approval(ctx, id)
}

// --- approaches

// PutApproach inserts or replaces an approach (the same id in the same
// session is the same approach).
func (s *Store) PutApproach(ctx context.Context, projectID, sessionID, kind string, a session.Approach, at time.Time) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO approaches(session_id, project_id, id, kind, body, recorded_at) VALUES (?,?,?,?,?,?)
		ON CONFLICT(session_id, id) DO UPDATE SET kind=excluded.kind, body=excluded.body, recorded_at=excluded.recorded_at`,
		sessionID, projectID, a.ID, kind, string(body), ts(at))
	if err != nil {
		return fmt.Errorf("write approach %s: %w", a.ID, err)
	}
	return nil
}

// Approaches lists recorded approaches, oldest first: of a project, or of
// one session when sessionID is set.
func (s *Store) Approaches(ctx context.Context, projectID, sessionID string) ([]session.RecordedApproach, error) {
	q := `SELECT session_id, kind, body FROM approaches WHERE project_id = ?`
	args := []any{projectID}
	if sessionID != "" {
		q += ` AND session_id = ?`
		args = append(args, sessionID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY recorded_at, rowid`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []session.RecordedApproach{}
	for rows.Next() {
		var r session.RecordedApproach
		var body string
		if err := rows.Scan(&r.SessionID, &r.Kind, &body); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(body), &r.Approach); err != nil {
			return nil, fmt.Errorf("approach row of %s: %w", r.SessionID, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
