package session_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	. "github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/sessionfiles"
	"github.com/openstarry/openstarry-edge/storage/sessionsql"
	"github.com/openstarry/openstarry-edge/transport/sessionapi"
)

// agentsFake stands in for the agent processes at this level (the tests of
// cmd/openstarry drive real ones): like an agent, it runs a task id once
// and answers an id it has seen with the result it recorded, and it
// remembers every run (by plan task id) and every task handed.
type agentsFake struct {
	mu      sync.Mutex
	runs    map[string]int
	results map[string]AgentResult
	tasks   []AgentTask
	fail    map[string]bool
	crash   chan struct{} // closed: Run returns ErrAgentCrashed
}

func newAgentsFake() *agentsFake {
	return &agentsFake{runs: map[string]int{}, results: map[string]AgentResult{}, fail: map[string]bool{}}
}

func (a *agentsFake) Master() string { return "master" }

func (a *agentsFake) Run(ctx context.Context, agentID string, t AgentTask) (AgentResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.crash != nil {
		select {
		case <-a.crash:
			return AgentResult{}, ErrAgentCrashed
		default:
		}
	}
	a.tasks = append(a.tasks, t)
	if res, seen := a.results[t.TaskID]; seen {
		return res, nil
	}
	a.runs[PlanTaskOf(t.TaskID)]++
	res := AgentResult{Status: "done", Output: t.Input}
	if a.fail[PlanTaskOf(t.TaskID)] {
		res = AgentResult{Status: "failed", Error: "boom"}
	}
	a.results[t.TaskID] = res
	return res, nil
}

func (a *agentsFake) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[id]
}

func openManager(t *testing.T, data string, logs *logbuf.Buffer) *Manager {
	t.Helper()
	m, err := Open(context.Background(), Options{Data: data, Log: zerolog.New(logs), PollInterval: 5 * time.Millisecond, OpenStore: openStore,
		CheckpointInterval: 20 * time.Millisecond, OpenBackup: sessionfiles.Open})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before t.TempDir is removed: a dispatcher still writing a
	// checkpoint would leave the directory not empty. Close is idempotent.
	t.Cleanup(func() { _ = m.Close(false) })
	return m
}

// openStore opens the real store, SQLite (storage/sessionsql).
func openStore(ctx context.Context, path string) (Store, error) {
	st, err := sessionsql.OpenStore(ctx, path)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// sqlDB is the manager's database, to edit behind its back.
func sqlDB(m *Manager) *sql.DB { return m.Store().(*sessionsql.Store).DB() }

// ts is a time as the store keeps it (RFC 3339 in UTC).
func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func plan(t *testing.T, body string) *CreateRequest {
	t.Helper()
	req, err := DecodeCreateRequest(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

const sixTasks = `{"name":"demo","tasks":[
	{"phase":1,"type":"concept","input":"a"},
	{"phase":1,"type":"design","input":"b","depends_on":[0],"approval":true},
	{"phase":1,"type":"design","input":"c","depends_on":[1]},
	{"phase":2,"type":"code","input":"d"},
	{"phase":2,"type":"code","input":"e","depends_on":[3]},
	{"phase":2,"type":"test","input":"f","depends_on":["task_p2_code_002"]}]}`

func taskOf(t *testing.T, m *Manager, p, id string) PlanTask {
	t.Helper()
	ts, err := m.Store().Tasks(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if x.ID == id {
			return x
		}
	}
	t.Fatalf("no task %s", id)
	return PlanTask{}
}

func TestPlanWithApprovalGate(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	defer m.Close(true)
	ag := newAgentsFake()
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, sixTasks))
	if err != nil {
		t.Fatal(err)
	}
	if ValidateProjectID(v.ID) != nil || len(v.Tasks) != 6 || v.Tasks[5].ID != "task_p2_test_001" ||
		v.Tasks[2].DependsOn[0] != "task_p1_design_001" || v.SessionID == "" {
		t.Fatalf("project %+v", v)
	}
	var ap Approval
	wait.For(t, 10*time.Second, "the approval gate", func() bool {
		aps, _ := m.Approvals(ctx, v.ID, ApprovalPending)
		if len(aps) == 1 {
			ap = aps[0]
		}
		return len(aps) == 1
	})
	if got := taskOf(t, m, v.ID, "task_p1_design_001"); got.State != WaitingForApproval || got.Status != TaskInProgress {
		t.Fatalf("gated task %+v", got)
	}
	if ag.count("task_p1_design_002") != 0 {
		t.Fatal("a dependent of a waiting task ran")
	}
	// A revision re-runs it with the feedback, under a new agent task id.
	if _, err := m.Decide(ctx, ap.ID, ApprovalRevision, "shorter"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Decide(ctx, ap.ID, ApprovalApproved, ""); !errors.Is(err, ErrConflict) {
		t.Fatalf("second decision: %v", err)
	}
	wait.For(t, 10*time.Second, "the revised run's approval", func() bool {
		aps, _ := m.Approvals(ctx, v.ID, ApprovalPending)
		if len(aps) == 1 {
			ap = aps[0]
		}
		return len(aps) == 1 && ap.Attempt == 1
	})
	ag.mu.Lock()
	var last AgentTask
	for _, x := range ag.tasks {
		if x.Type != TypeSessionSummary {
			last = x
		}
	}
	ag.mu.Unlock()
	if ag.count("task_p1_design_001") != 2 || last.TaskID != AgentTaskID(v.ID, v.SessionID, "task_p1_design_001", 1) || !strings.Contains(string(last.Input), "shorter") {
		t.Fatalf("revision: last %+v", last)
	}
	if _, err := m.Decide(ctx, ap.ID, ApprovalApproved, "good"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the session's end in its checkpoint", func() bool {
		cp, err := DecodeCheckpoint(mustRead(t, m.Layout().Checkpoint(v.ID, v.SessionID)))
		return err == nil && cp.Session.Status == SessionCompleted
	})
	ag.mu.Lock()
	defer ag.mu.Unlock()
	for id, n := range ag.runs {
		if want := map[string]int{"task_p1_design_001": 2}[id]; n != max(want, 1) {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	cp, err := DecodeCheckpoint(mustRead(t, m.Layout().Checkpoint(v.ID, v.SessionID)))
	if err != nil || len(cp.CompletedTasks) != 6 || cp.CompletedTasks[1].Status != "approved" || cp.Session.EndedAt == nil {
		t.Fatalf("checkpoint %+v %v", cp, err)
	}
	checkModes(t, data)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkModes: files 0600, directories 0700, whatever the umask.
func checkModes(t *testing.T, data string) {
	t.Helper()
	_ = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == data {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a file removed since it was listed (a SQLite journal between two transactions)
		} else if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
}

func TestFailureBlocksDependentsAndResume(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	ag := newAgentsFake()
	ag.fail["task_p1_design_001"] = true
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"concept"},{"phase":1,"type":"design","depends_on":[0]},{"phase":2,"type":"code","depends_on":[1]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the error interruption", func() bool {
		s, _ := m.Store().Session(ctx, v.SessionID)
		return s.Status == SessionInterrupted && s.InterruptionReason == ReasonError
	})
	if got := taskOf(t, m, v.ID, "task_p2_code_001"); got.Status != TaskBlocked {
		t.Fatalf("dependent %+v", got)
	}
	if _, err := m.RecordApproach(ctx, &ApproachRecord{ProjectID: v.ID, SessionID: v.SessionID, Kind: ApproachFailed,
		Approach: Approach{Description: "design straight away", FailureReason: "boom"}}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := m.RecordApproach(ctx, &ApproachRecord{ProjectID: v.ID, SessionID: v.SessionID, Kind: ApproachUntried,
		Approach: Approach{Description: "design after a sketch", NextToTry: &yes}}); err != nil {
		t.Fatal(err)
	}
	// The resume: completed tasks are not redone; the failed one runs again.
	ag.mu.Lock()
	ag.fail = map[string]bool{}
	ag.mu.Unlock()
	res, err := m.Resume(ctx, v.ID, v.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, v.ID, v.SessionID); !errors.Is(err, ErrConflict) {
		t.Fatalf("second resume: %v", err)
	}
	var rc ResumeContext
	// The failed approaches: the one the dispatcher recorded when the agent
	// failed the task, and the one recorded by hand.
	if err := json.Unmarshal(res.ResumeContext, &rc); err != nil || len(rc.FailedApproaches) != 2 || len(rc.NextApproaches) != 1 ||
		rc.FailedApproaches[0].ID != "approach_f_task_p1_design_001_0" || rc.FailedApproaches[0].FailureReason != "failed: boom" ||
		rc.InterruptionReason != ReasonError || rc.ParentSessionID != v.SessionID {
		t.Fatalf("resume context %s %v", res.ResumeContext, err)
	}
	wait.For(t, 10*time.Second, "the child's end", func() bool {
		s, _ := m.Store().Session(ctx, res.Session.ID)
		return s.Status == SessionCompleted
	})
	if ag.count("task_p1_concept_001") != 1 || ag.count("task_p1_design_001") != 2 {
		t.Fatalf("runs %v", ag.runs)
	}
	// Every task of the child session carries its resume context.
	ag.mu.Lock()
	for _, x := range ag.tasks {
		if (x.SessionID == res.Session.ID) != (string(x.ResumeContext) == string(res.ResumeContext)) {
			t.Errorf("task %s of %s: resume context %s", x.TaskID, x.SessionID, x.ResumeContext)
		}
	}
	ag.mu.Unlock()
	if s, _ := m.Store().Session(ctx, v.SessionID); s.Status != SessionResumed {
		t.Fatalf("parent %+v", s)
	}
	m.Close(true)
}

func TestScanAndCrash(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	ag := newAgentsFake()
	ag.crash = make(chan struct{})
	close(ag.crash)
	m.SetAgents(ag)
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the crash interruption", func() bool {
		s, _ := m.Store().Session(ctx, v.SessionID)
		return s.Status == SessionInterrupted && s.InterruptionReason == ReasonCrash
	})
	m.Close(false)

	// A session left open (the daemon died) is found by the next boot's scan.
	m = openManager(t, data, logs)
	now := time.Now()
	sess := &Session{ID: NewSessionID(now), ProjectID: v.ID, Status: SessionActive, StartedAt: now}
	if err := m.Store().InsertSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	got, err := m.ScanInterrupted(ctx, ReasonPowerLoss)
	if err != nil || len(got) != 1 || got[0].ID != sess.ID {
		t.Fatalf("scan %v %v", got, err)
	}
	s, _ := m.Store().Session(ctx, sess.ID)
	if s.Status != SessionInterrupted || s.InterruptionReason != ReasonPowerLoss || s.EndedAt == nil {
		t.Fatalf("scanned %+v", s)
	}
	m.Close(true)
}

func TestRebuildAndDamagedFiles(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	m.SetAgents(newAgentsFake())
	v, err := m.CreateProject(ctx, plan(t, sixTasks))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the gate", func() bool { aps, _ := m.Approvals(ctx, v.ID, ApprovalPending); return len(aps) == 1 })
	if _, err := m.RecordApproach(ctx, &ApproachRecord{ProjectID: v.ID, SessionID: v.SessionID, Kind: ApproachVerified,
		Approach: Approach{ID: "approach_001", Description: "three ideas"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	before, _ := json.Marshal(mustView(t, data, v.ID))

	// sessions.db (and its WAL) deleted: rebuilt from the files.
	for _, f := range []string{"sessions.db", "sessions.db-wal", "sessions.db-shm"} {
		os.Remove(filepath.Join(data, f))
	}
	m = openManager(t, data, logs)
	after, _ := json.Marshal(viewOf(t, m, v.ID))
	if !bytes.Equal(before, after) {
		t.Fatalf("rebuilt project differs:\n%s\n%s", before, after)
	}
	aps, _ := m.Approvals(ctx, v.ID, "")
	apr, _ := m.Approaches(ctx, v.ID)
	if len(aps) != 1 || len(apr.Verified) != 1 {
		t.Fatalf("rebuilt approvals %v approaches %+v", aps, apr)
	}
	if !strings.Contains(logs.String(), "sessions.db was missing: rebuilt 1 project(s)") {
		t.Fatalf("no warning of the rebuild:\n%s", logs)
	}
	m.Close(false)

	// A damaged JSON file: the database wins, the file is rewritten.
	cpPath := filepath.Join(data, "projects", v.ID, "sessions", v.SessionID, "state_checkpoint.json")
	apPath := filepath.Join(data, "projects", v.ID, "sessions", v.SessionID, "approaches.json")
	os.WriteFile(cpPath, []byte(`{"schema_version":"1.0","project_id":`), 0o600)
	os.WriteFile(apPath, []byte(`{"schema_version":"1.0","session_id":"sess_20240115143000_x1y2z3","verified":[]}`), 0o600)
	m = openManager(t, data, logs)
	defer m.Close(true)
	for _, p := range []string{cpPath, apPath} {
		if !strings.Contains(logs.String(), p+" is damaged: the database wins") {
			t.Errorf("no warning naming %s:\n%s", p, logs)
		}
	}
	cp, err := DecodeCheckpoint(mustRead(t, cpPath))
	if err != nil || cp.SessionID != v.SessionID || len(cp.Tasks) != 6 {
		t.Fatalf("rewritten checkpoint: %v", err)
	}
	af, err := DecodeApproaches(mustRead(t, apPath))
	if err != nil || af.SessionID != v.SessionID || len(af.Verified) != 1 {
		t.Fatalf("rewritten approaches: %+v %v", af, err)
	}
}

func mustView(t *testing.T, data, id string) *ProjectView {
	m := openManager(t, data, &logbuf.Buffer{})
	defer m.Close(false)
	return viewOf(t, m, id)
}

func viewOf(t *testing.T, m *Manager, id string) *ProjectView {
	v, err := m.View(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheckpointInterval(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	m := openManager(t, data, &logbuf.Buffer{})
	defer m.Close(true)
	m.SetAgents(newAgentsFake())
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a","approval":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the gate", func() bool { aps, _ := m.Approvals(ctx, v.ID, ApprovalPending); return len(aps) == 1 })
	path := m.Layout().Checkpoint(v.ID, v.SessionID)
	first, _ := DecodeCheckpoint(mustRead(t, path))
	// Nothing happens while the task waits: only the interval writes.
	wait.For(t, 10*time.Second, "a periodic checkpoint", func() bool {
		cp, err := DecodeCheckpoint(mustRead(t, path))
		return err == nil && cp.Timestamp.After(first.Timestamp)
	})
}

func TestAPIErrors(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, t.TempDir(), &logbuf.Buffer{})
	defer m.Close(true)
	m.SetAgents(newAgentsFake())
	mux := http.NewServeMux()
	sessionapi.Routes(mux, m, zerolog.Nop())
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a","approval":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
		code               string
	}{
		{"POST", "/projects", `{"name":"x","tasks":[{"phase":1,"type":"a"}]}`, 201, ""},
		{"POST", "/projects", `{"name":"x","tasks":[]}`, 400, CodeBadRequest},
		{"POST", "/projects", `{"name":"x","tasks":[{"phase":1,"type":"A"}]}`, 400, CodeBadRequest},
		{"POST", "/projects", `{"name":"x","tasks":[{"phase":1,"type":"a","depends_on":[0]}]}`, 400, CodeBadRequest},
		{"POST", "/projects", `{"name":"x","tasks":[{"phase":1,"type":"a","depends_on":["task_p9_z_001"]}]}`, 400, CodeBadRequest},
		{"POST", "/projects", `{"name":"x","bogus":1,"tasks":[{"phase":1,"type":"a"}]}`, 400, CodeBadRequest},
		{"POST", "/projects", `not json`, 400, CodeBadRequest},
		{"GET", "/projects", "", 200, ""},
		{"GET", "/projects/" + v.ID, "", 200, ""},
		{"GET", "/projects/proj_20240115_zzzzzz", "", 404, CodeNotFound},
		{"GET", "/projects/bad", "", 400, CodeBadID},
		{"GET", "/projects/" + v.ID + "/sessions", "", 200, ""},
		{"GET", "/projects/" + v.ID + "/sessions/" + v.SessionID, "", 200, ""},
		{"GET", "/projects/" + v.ID + "/sessions/sess_x", "", 400, CodeBadID},
		{"GET", "/projects/" + v.ID + "/sessions/sess_20240115143000_x1y2z3", "", 404, CodeNotFound},
		{"POST", "/projects/" + v.ID + "/sessions/" + v.SessionID + "/resume", "", 409, CodeConflict},
		{"GET", "/projects/" + v.ID + "/approvals", "", 200, ""},
		{"GET", "/projects/" + v.ID + "/approvals?status=maybe", "", 400, CodeBadRequest},
		{"GET", "/projects/" + v.ID + "/approaches", "", 200, ""},
		{"POST", "/approvals/0", `{"decision":"approve"}`, 400, CodeBadID},
		{"POST", "/approvals/x", `{"decision":"approve"}`, 400, CodeBadID},
		{"POST", "/approvals/999", `{"decision":"approve"}`, 404, CodeNotFound},
		{"POST", "/approvals/1", `{"decision":"maybe"}`, 400, CodeBadRequest},
		{"POST", "/approvals/1", `{"decision":"revise"}`, 400, CodeBadRequest},
		{"GET", "/approvals?status=pending", "", 200, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("%d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if tc.code != "" {
				body := w.Body.String()
				var e map[string]string
				if strings.Count(strings.TrimSpace(body), "\n") != 0 || json.Unmarshal([]byte(body), &e) != nil || e["code"] != tc.code || e["error"] == "" {
					t.Fatalf("error body %q, want one line with code %s", body, tc.code)
				}
			}
		})
	}
	wait.For(t, 10*time.Second, "the gate", func() bool { aps, _ := m.Approvals(ctx, v.ID, ApprovalPending); return len(aps) == 1 })
	aps, _ := m.Approvals(ctx, v.ID, ApprovalPending)
	for _, want := range []int{200, 409} {
		r := httptest.NewRequest("POST", "/approvals/"+strconv.Itoa(int(aps[0].ID)), strings.NewReader(`{"decision":"approve","feedback":"ok"}`))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != want {
			t.Fatalf("decision: %d, want %d: %s", w.Code, want, w.Body)
		}
	}
}

func TestDecoders(t *testing.T) {
	for _, tc := range []struct {
		file string
		dec  func([]byte) error
	}{
		{"testdata/project_seed.json", func(b []byte) error { _, err := DecodeProjectFile(b); return err }},
		{"testdata/state_checkpoint_seed.json", func(b []byte) error { _, err := DecodeCheckpoint(b); return err }},
		{"testdata/approaches_seed.json", func(b []byte) error { _, err := DecodeApproaches(b); return err }},
		{"testdata/remaining_tasks_seed.json", func(b []byte) error { _, err := DecodeRemaining(b); return err }},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data := mustRead(t, tc.file)
			if err := tc.dec(data); err != nil {
				t.Fatalf("the specification's example: %v", err)
			}
			for name, bad := range map[string][]byte{
				"truncated":     data[:len(data)/2],
				"trailing":      append(append([]byte{}, data...), []byte(" {}")...),
				"other version": bytes.Replace(data, []byte(`"1.0"`), []byte(`"2.0"`), 1),
				"traversal id":  bytes.Replace(data, []byte(`sess_20240115143000_x1y2z3`), []byte(`../../../../etc/x`), 1),
				"empty":         {},
			} {
				if name == "traversal id" && !bytes.Contains(data, []byte("sess_")) {
					continue
				}
				if err := tc.dec(bad); !errors.Is(err, ErrDamaged) {
					t.Errorf("%s: %v, want ErrDamaged", name, err)
				}
			}
		})
	}
}
