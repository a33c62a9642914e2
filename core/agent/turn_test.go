package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// modelBrain answers like a model: at step 0 it calls tools, later it
// answers with what it saw. It records every step it was asked.
type modelBrain struct {
	mu    sync.Mutex
	calls []agent.Call
	asked []int // the Step of every Think
	seen  [][]agent.ToolResult
}

func (b *modelBrain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, turn.Step)
	b.seen = append(b.seen, append([]agent.ToolResult(nil), turn.Results...))
	if turn.Step == 0 {
		return agent.Reply{Calls: b.calls, Usage: agent.Usage{PromptTokens: 10, CompletionTokens: 2}}, nil
	}
	out, _ := json.Marshal(turn.Results)
	return agent.Reply{Output: out}, nil
}

func (b *modelBrain) steps() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.asked...)
}

func modelCalls() []agent.Call {
	return []agent.Call{
		{ID: "c1", Tool: "sleep_ms", Args: json.RawMessage(`{"ms":1}`)},
		{ID: "c2", Tool: "file_append", Args: json.RawMessage(`{"file":"log.txt","line":"once"}`)},
	}
}

// crashAt runs one task on a fresh agent and returns the first snapshot a
// save made durable for which pick is true: the store's state had the
// process died right after that save.
func crashAt(t *testing.T, e *env, pick func(*agent.Snapshot) bool) *agent.Snapshot {
	t.Helper()
	return crashAtTask(t, e, &agent.Task{TaskID: "t1", Input: json.RawMessage(`"do it"`)}, pick)
}

// crashAtTask is crashAt for a task of the caller's.
func crashAtTask(t *testing.T, e *env, task *agent.Task, pick func(*agent.Snapshot) bool) *agent.Snapshot {
	t.Helper()
	var crashed *agent.Snapshot
	e.cfg.AfterSave = func(s *agent.Snapshot) {
		if crashed == nil && pick(s) {
			crashed = s.Clone()
		}
	}
	rt := e.start()
	ev, err := agent.TaskEvent(task, "test", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if res := rt.Submit(context.Background(), ev); res.Err != nil {
		t.Fatal(res.Err)
	}
	waitTask(t, rt, task.TaskID)
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if crashed == nil {
		t.Fatal("no save matched the crash point")
	}
	if err := e.store.Save(context.Background(), crashed); err != nil {
		t.Fatal(err)
	}
	e.cfg.AfterSave = nil
	return crashed
}

// The brain's reply is durable before any of its tools runs; after a crash
// at that instant the brain is not asked again and each tool runs once.
func TestReplySavedBeforeToolsRun(t *testing.T) {
	e := newEnv(t)
	b1 := &modelBrain{calls: modelCalls()}
	e.cfg.Brain = b1
	crashed := crashAt(t, e, func(s *agent.Snapshot) bool { return s.Turn != nil })
	if crashed.PendingAction != nil || len(crashed.Turn.Steps) != 1 || len(crashed.Turn.Steps[0].Calls) != 2 ||
		len(crashed.Turn.Steps[0].Results) != 0 || crashed.Turn.Usage.PromptTokens != 10 {
		t.Fatalf("the first save after the reply = %+v", crashed.Turn)
	}
	// The crash came before any tool ran: remove what the first run wrote.
	log := filepath.Join(e.dir, "log.txt")
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}

	b2 := &modelBrain{calls: modelCalls()}
	e.cfg.Brain = b2
	rt := e.start()
	st := waitTask(t, rt, "t1")
	if st.Status != agent.ResultDone {
		t.Fatalf("state = %+v", st)
	}
	if got := b2.steps(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after the restart the brain was asked at steps %v, want only [1]", got)
	}
	if data, _ := os.ReadFile(log); string(data) != "once\n" {
		t.Fatalf("log.txt = %q, want the tool run once", data)
	}
	var res []agent.ToolResult
	if err := json.Unmarshal(st.Output, &res); err != nil || len(res) != 2 || res[0].CallID != "c1" || res[1].CallID != "c2" {
		t.Fatalf("output = %s", st.Output)
	}
	s, _ := rt.Snapshot(context.Background())
	if s.Turn != nil || s.Memory.WorkingVariables["tokens_prompt"] != int64(10) {
		t.Fatalf("after the task: turn %+v, vars %v", s.Turn, s.Memory.WorkingVariables)
	}
}

// A crash while a non-idempotent tool runs, with unknown_outcome
// ask_model: the brain is told the outcome is unknown and the tool is not
// run again.
func TestUnknownOutcomeToldToModel(t *testing.T) {
	e := newEnv(t)
	e.cfg.UnknownOutcome = agent.UnknownAskModel
	e.cfg.Brain = &modelBrain{calls: modelCalls()}
	crashed := crashAt(t, e, func(s *agent.Snapshot) bool { return s.PendingAction != nil })
	if crashed.Turn == nil || len(crashed.Turn.Steps[0].Results) != 1 || crashed.PendingAction.Tool != "file_append" {
		t.Fatalf("intent snapshot: turn %+v pending %+v", crashed.Turn, crashed.PendingAction)
	}
	b2 := &modelBrain{calls: modelCalls()}
	e.cfg.Brain = b2
	rt := e.start()
	st := waitTask(t, rt, "t1")
	if st.Status != agent.ResultDone {
		t.Fatalf("state = %+v", st)
	}
	if got := b2.steps(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("brain asked at steps %v", got)
	}
	seen := b2.seen[0]
	if len(seen) != 2 || seen[0].Error != "" || !strings.Contains(seen[1].Error, "outcome unknown") ||
		!strings.Contains(seen[1].Error, "Check before retrying") || seen[1].CallID != "c2" {
		t.Fatalf("results the brain saw = %+v", seen)
	}
	if data, _ := os.ReadFile(filepath.Join(e.dir, "log.txt")); string(data) != "once\n" {
		t.Fatalf("log.txt = %q: the tool ran again", data)
	}
	s := e.store.stored(t, "a1")
	if s.PendingAction != nil || s.Turn != nil || s.Memory.WorkingVariables["unknown_outcomes"] != float64(1) {
		t.Fatalf("recovered snapshot: pending %+v turn %+v vars %v", s.PendingAction, s.Turn, s.Memory.WorkingVariables)
	}
}

// With the default (end_task), and with approval, the same crash ends the
// task as unknown_outcome without asking the brain.
func TestUnknownOutcomeEndsTask(t *testing.T) {
	for _, mode := range []string{"", agent.UnknownEndTask, agent.UnknownApproval} {
		t.Run("mode="+mode, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.UnknownOutcome = mode
			e.cfg.Brain = &modelBrain{calls: modelCalls()}
			crashAt(t, e, func(s *agent.Snapshot) bool { return s.PendingAction != nil })
			b2 := &modelBrain{calls: modelCalls()}
			e.cfg.Brain = b2
			rt := e.start()
			st := waitTask(t, rt, "t1")
			if st.Status != agent.ResultUnknownOutcome || len(b2.steps()) != 0 {
				t.Fatalf("state = %+v, brain asked at %v", st, b2.steps())
			}
			// approval: the task belongs to no session, so nobody is asked,
			// and the error says so.
			if noSession := strings.Contains(st.Error, "belongs to no project session"); noSession != (mode == agent.UnknownApproval) {
				t.Fatalf("mode %q: error %q", mode, st.Error)
			}
		})
	}
}

// A brain that cannot reach its model keeps the task running (not failed)
// and the agent accepts other tasks; Stop ends the wait, and the task
// resumes after the restart.
func TestUnreachableBrainWaits(t *testing.T) {
	e := newEnv(t)
	e.cfg.RetryMin = time.Millisecond
	e.cfg.RetryMax = 5 * time.Millisecond
	var mu sync.Mutex
	down := true
	attempts := 0
	e.cfg.Brain = brainFunc(func(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if down {
			return agent.Reply{}, agent.ErrBrainUnavailable
		}
		return agent.Reply{Output: turn.Task.Input}, nil
	})
	rt := e.start()
	submit(t, rt, "t1", "first")
	if res := submit(t, rt, "t2", "second"); res.Err != nil {
		t.Fatalf("submit while waiting: %v", res.Err)
	}
	wait.For(t, 10*time.Second, "three attempts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return attempts >= 3
	})
	if st, _, _ := rt.TaskState(context.Background(), "t1"); st.Status != agent.TaskRunning {
		t.Fatalf("t1 = %+v", st)
	}
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := e.store.stored(t, "a1")
	if len(s.EventQueueBackup) != 2 || s.Status != agent.StatusStopped {
		t.Fatalf("after stop: queue %d status %s", len(s.EventQueueBackup), s.Status)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	rt2 := e.start()
	for _, id := range []string{"t1", "t2"} {
		if st := waitTask(t, rt2, id); st.Status != agent.ResultDone {
			t.Fatalf("%s = %+v", id, st)
		}
	}
}

type brainFunc func(ctx context.Context, turn agent.Turn) (agent.Reply, error)

func (f brainFunc) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	return f(ctx, turn)
}

// decider is an operator in memory: it records the approvals asked and
// answers what decide set.
type decider struct {
	mu       sync.Mutex
	asked    []agent.UnknownOutcome
	decision agent.Decision
	reads    int
	refuse   error // Ask's error
}

func (d *decider) Ask(ctx context.Context, q agent.UnknownOutcome) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, q)
	if d.refuse != nil {
		return 0, d.refuse
	}
	return 7, nil
}

func (d *decider) Decision(ctx context.Context, id int64) (agent.Decision, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	if id != 7 {
		return agent.Decision{}, errors.New("no such approval")
	}
	if d.decision.Status == "" {
		return agent.Decision{Status: agent.DecisionPending}, nil
	}
	return d.decision, nil
}

func (d *decider) decide(status, feedback string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.decision = agent.Decision{Status: status, Feedback: feedback, DecidedBy: "ops"}
}

func (d *decider) counts() (asked, reads int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.asked), d.reads
}

// With unknown_outcome approval, a crash while a non-idempotent tool of a
// session's task runs puts it before an operator: the task waits (running)
// for the decision, across a restart without asking again; approved, the
// brain sees the decision as the tool's result and answers; rejected, the
// task fails with the operator's words. The tool never runs again.
func TestUnknownOutcomeApproval(t *testing.T) {
	for _, decision := range []string{agent.DecisionApproved, agent.DecisionRejected} {
		t.Run(decision, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.UnknownOutcome = agent.UnknownApproval
			e.cfg.DecisionPoll = 5 * time.Millisecond
			d := &decider{}
			e.cfg.Decider = d
			e.cfg.Brain = &modelBrain{calls: modelCalls()}
			task := &agent.Task{TaskID: "t1", Input: json.RawMessage(`"do it"`),
				ProjectID: "proj_20260101_abc123", SessionID: "sess_20260101120000_abc123"}
			crashAtTask(t, e, task, func(s *agent.Snapshot) bool { return s.PendingAction != nil })

			b2 := &modelBrain{calls: modelCalls()}
			e.cfg.Brain = b2
			rt := e.start()
			wait.For(t, 10*time.Second, "the approval asked and read", func() bool {
				asked, reads := d.counts()
				return asked == 1 && reads > 0
			})
			if st, _, _ := rt.TaskState(context.Background(), "t1"); st.Status != agent.TaskRunning {
				t.Fatalf("while waiting: %+v", st)
			}
			if q := d.asked[0]; q.Tool != "file_append" || q.TaskID != "t1" || q.SessionID != task.SessionID || !strings.Contains(string(q.Args), "once") {
				t.Fatalf("asked %+v", q)
			}
			// A stop while waiting keeps the approval's id: the next
			// process reads the decision without asking again.
			if err := rt.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if s := e.store.stored(t, "a1"); s.Turn == nil || s.Turn.Awaiting == nil || s.Turn.Awaiting.ApprovalID != 7 || len(s.EventQueueBackup) != 1 {
				t.Fatalf("stopped while waiting: turn %+v queue %d", s.Turn, len(s.EventQueueBackup))
			}
			d.decide(decision, "checked: the line is there")
			rt = e.start()
			st := waitTask(t, rt, "t1")
			if asked, _ := d.counts(); asked != 1 {
				t.Fatalf("the approval was asked %d times", asked)
			}
			if decision == agent.DecisionRejected {
				if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "rejected") || !strings.Contains(st.Error, "checked: the line is there") || len(b2.steps()) != 0 {
					t.Fatalf("rejected: %+v, brain asked at %v", st, b2.steps())
				}
			} else {
				if st.Status != agent.ResultDone || len(b2.steps()) != 1 {
					t.Fatalf("approved: %+v, brain asked at %v", st, b2.steps())
				}
				seen := b2.seen[0]
				if len(seen) != 2 || seen[1].CallID != "c2" || seen[1].Error != "" ||
					!strings.Contains(string(seen[1].Output), `"operator_decision":"approved"`) ||
					!strings.Contains(string(seen[1].Output), "checked: the line is there") {
					t.Fatalf("results the brain saw = %+v", seen)
				}
			}
			if data, _ := os.ReadFile(filepath.Join(e.dir, "log.txt")); string(data) != "once\n" {
				t.Fatalf("log.txt = %q: the tool ran again", data)
			}
		})
	}
}

// When session continuity refuses the approval for good (its project is
// not known), the task ends unknown_outcome with the reason instead of
// waiting, and the agent goes on with its next task.
func TestUnknownOutcomeApprovalRefused(t *testing.T) {
	e := newEnv(t)
	e.cfg.UnknownOutcome = agent.UnknownApproval
	d := &decider{refuse: fmt.Errorf("%w: task task_p1_a_001 of project proj_20260101_abc123: not found", agent.ErrNoApproval)}
	e.cfg.Decider = d
	e.cfg.Brain = &modelBrain{calls: modelCalls()}
	task := &agent.Task{TaskID: "t1", Input: json.RawMessage(`"do it"`),
		ProjectID: "proj_20260101_abc123", SessionID: "sess_20260101120000_abc123"}
	crashAtTask(t, e, task, func(s *agent.Snapshot) bool { return s.PendingAction != nil })
	e.cfg.Brain = &modelBrain{calls: modelCalls()}
	rt := e.start()
	st := waitTask(t, rt, "t1")
	if st.Status != agent.ResultUnknownOutcome || !strings.Contains(st.Error, "not found") || !strings.Contains(st.Error, "file_append") {
		t.Fatalf("state = %+v", st)
	}
	submit(t, rt, "t2", "next")
	if st := waitTask(t, rt, "t2"); st.Status != agent.ResultDone {
		t.Fatalf("the next task: %+v", st)
	}
}

// TestSessionSummaryRunsNoTools: session continuity's summary request
// offers the model no tools and, in the plan namespace, gets the summary
// instruction; a reply that calls a tool fails the task (nothing runs).
func TestSessionSummaryRunsNoTools(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var turns []agent.Turn
	e.cfg.Brain = brainFunc(func(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
		mu.Lock()
		turns = append(turns, turn)
		mu.Unlock()
		if strings.Contains(string(turn.Task.Input), "tools please") {
			return agent.Reply{Calls: []agent.Call{{ID: "c", Tool: "file_append", Args: json.RawMessage(`{"file":"x.txt","line":"no"}`)}}}, nil
		}
		return agent.Reply{Output: json.RawMessage(`"a summary"`)}, nil
	})
	rt := e.start()
	id := func(n string) string {
		return "plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:summary:" + n
	}
	for _, tc := range []struct{ id, input string }{{id("1"), `"1 of 2 tasks completed"`}, {id("2"), `"tools please"`}} {
		ev, err := agent.TaskEvent(&agent.Task{TaskID: tc.id, Type: agent.TaskTypeSessionSummary, Input: json.RawMessage(tc.input),
			ProjectID: "proj_20240115_a1b2c3", SessionID: "sess_20240115143000_x1y2z3"}, "test", time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if res := rt.Submit(context.Background(), ev); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if st := waitTask(t, rt, id("1")); st.Status != agent.ResultDone || string(st.Output) != `"a summary"` {
		t.Fatalf("summary: %+v", st)
	}
	if st := waitTask(t, rt, id("2")); st.Status != agent.ResultFailed || !strings.Contains(st.Error, "runs no tools") {
		t.Fatalf("a summary calling a tool: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, turn := range turns {
		if len(turn.Tools) != 0 || !strings.Contains(turn.Resume, "context summary") {
			t.Fatalf("turn of %s: %d tools, resume %q", turn.Task.TaskID, len(turn.Tools), turn.Resume)
		}
	}
	if _, err := os.Stat(filepath.Join(e.cfg.ArtifactsDir, "x.txt")); err == nil {
		t.Fatal("the summary's tool ran")
	}
}
