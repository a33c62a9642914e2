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
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// jsonStore keeps snapshots as contract JSON in memory, so every Load sees
// exactly what a store would give back. It can be told to fail.
type jsonStore struct {
	mu    sync.Mutex
	data  map[string][]byte
	saves int
	delay time.Duration
	fail  error
	busy  []bool // agent.BusySave of each Save
}

func newJSONStore() *jsonStore { return &jsonStore{data: map[string][]byte{}} }

func (m *jsonStore) Save(ctx context.Context, s *agent.Snapshot) error {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.busy = append(m.busy, agent.BusySave(ctx))
	b, err := agent.Encode(s)
	if err != nil {
		return err
	}
	m.data[s.AgentID] = b
	m.saves++
	return nil
}

func (m *jsonStore) Load(ctx context.Context, id string) (*agent.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.data[id]
	if !ok {
		return nil, nil
	}
	return agent.Decode(b)
}

func (m *jsonStore) stored(t *testing.T, id string) *agent.Snapshot {
	t.Helper()
	s, err := m.Load(context.Background(), id)
	if err != nil || s == nil {
		t.Fatalf("stored snapshot: %v %v", s, err)
	}
	return s
}

type env struct {
	t     *testing.T
	store *jsonStore
	dir   string
	cfg   agent.Config
}

func newEnv(t *testing.T) *env {
	echo, err := brain.New(design.Brain{Provider: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: newJSONStore(), dir: t.TempDir()}
	e.cfg = agent.Config{
		AgentID: "a1", Store: e.store, Brain: echo, Tools: tool.MustResolve("file_append", "sleep_ms"),
		ArtifactsDir: e.dir, Log: zerolog.New(zerolog.NewTestWriter(t)),
	}
	return e
}

func (e *env) start() *agent.Runtime {
	e.t.Helper()
	rt, err := agent.Start(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	return rt
}

func submit(t *testing.T, rt *agent.Runtime, id string, input any) agent.SubmitResult {
	t.Helper()
	in, _ := json.Marshal(input)
	task := &agent.Task{TaskID: id, Input: in}
	ev, err := agent.TaskEvent(task, "test", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return rt.Submit(context.Background(), ev)
}

func waitTask(t *testing.T, rt *agent.Runtime, id string) agent.TaskState {
	t.Helper()
	var st agent.TaskState
	wait.Until(t, 10*time.Second, "task "+id+" to finish", func() error {
		s, ok, err := rt.TaskState(context.Background(), id)
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			return errors.New("unknown")
		case s.Status == agent.TaskQueued || s.Status == agent.TaskRunning:
			return errors.New(s.Status)
		}
		st = s
		return nil
	})
	return st
}

func appendCall(file, line string) map[string]any {
	return map[string]any{"call": []map[string]any{{"tool": "file_append", "args": map[string]string{"file": file, "line": line}}}}
}

func TestEchoString(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	if res := submit(t, rt, "t1", "hello"); res.Err != nil || res.Duplicate || res.State.Status != agent.TaskQueued {
		t.Fatalf("submit: %+v", res)
	}
	st := waitTask(t, rt, "t1")
	if st.Status != agent.ResultDone || string(st.Output) != `"hello"` || st.TickIndex != 1 {
		t.Fatalf("state = %+v", st)
	}
	s, _ := rt.Snapshot(context.Background())
	if s.TickIndex != 1 || len(s.Memory.ShortTermHistory) != 2 || len(s.EventQueueBackup) != 0 {
		t.Fatalf("snapshot after one task: %+v", s)
	}
}

func TestDuplicateRunsOnce(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	submit(t, rt, "t1", appendCall("log.txt", "t1"))
	dup := submit(t, rt, "t1", appendCall("log.txt", "t1"))
	if !dup.Duplicate {
		t.Fatalf("second submit not a duplicate: %+v", dup)
	}
	waitTask(t, rt, "t1")
	again := submit(t, rt, "t1", appendCall("log.txt", "t1"))
	if !again.Duplicate || again.State.Status != agent.ResultDone {
		t.Fatalf("submit after done: %+v", again)
	}
	data, _ := os.ReadFile(filepath.Join(e.dir, "log.txt"))
	if string(data) != "t1\n" {
		t.Fatalf("file = %q, want one line", data)
	}
}

// A crash after the intent of a non-idempotent tool was saved: the next
// process reports unknown_outcome and never runs the tool again.
func TestPendingActionBecomesUnknownOutcome(t *testing.T) {
	e := newEnv(t)
	var crashed *agent.Snapshot
	e.cfg.AfterSave = func(s *agent.Snapshot) {
		if s.PendingAction != nil && crashed == nil {
			crashed = s.Clone()
		}
	}
	rt := e.start()
	submit(t, rt, "t1", appendCall("log.txt", "t1"))
	waitTask(t, rt, "t1")
	_ = rt.Stop(context.Background())
	if crashed == nil {
		t.Fatal("no save carried a pending_action before the tool ran")
	}
	if len(crashed.EventQueueBackup) != 1 || crashed.PendingAction.Tool != "file_append" {
		t.Fatalf("intent snapshot = %+v", crashed)
	}
	// Put the store back to the instant after the intent was saved.
	if err := e.store.Save(context.Background(), crashed); err != nil {
		t.Fatal(err)
	}
	e.cfg.AfterSave = nil
	rt2 := e.start()
	st := waitTask(t, rt2, "t1")
	if st.Status != agent.ResultUnknownOutcome || !strings.Contains(st.Error, "file_append") {
		t.Fatalf("state after crash = %+v", st)
	}
	data, _ := os.ReadFile(filepath.Join(e.dir, "log.txt"))
	if string(data) != "t1\n" {
		t.Fatalf("file = %q: the tool ran again", data)
	}
	s := e.store.stored(t, "a1")
	if s.PendingAction != nil || len(s.EventQueueBackup) != 0 || s.TickIndex <= crashed.TickIndex {
		t.Fatalf("recovered snapshot = %+v", s)
	}
}

// Events queued but not processed when the process died run after restart.
func TestQueuedEventsSurviveRestart(t *testing.T) {
	e := newEnv(t)
	e.cfg.Brain = agent.Brain(blockBrain{release: make(chan struct{})})
	rt := e.start()
	for i := 0; i < 3; i++ {
		if res := submit(t, rt, fmt.Sprint("t", i), "x"); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// The process "dies" now: the store holds what was acknowledged.
	s := e.store.stored(t, "a1")
	if len(s.EventQueueBackup) != 3 {
		t.Fatalf("acknowledged events not durable: queue %d", len(s.EventQueueBackup))
	}
	e2 := newEnv(t)
	e2.store = e.store
	e2.cfg.Store = e.store
	rt2 := e2.start()
	for i := 0; i < 3; i++ {
		if st := waitTask(t, rt2, fmt.Sprint("t", i)); st.Status != agent.ResultDone {
			t.Fatalf("t%d = %+v", i, st)
		}
	}
	close(e.cfg.Brain.(blockBrain).release)
}

type blockBrain struct{ release chan struct{} }

func (b blockBrain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	<-b.release
	return agent.Reply{Output: turn.Task.Input}, nil
}

func TestContextBudget(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxMessages = 4
	rt := e.start()
	for i := 0; i < 5; i++ {
		submit(t, rt, fmt.Sprint("t", i), fmt.Sprint("message ", i))
	}
	waitTask(t, rt, "t4")
	s, _ := rt.Snapshot(context.Background())
	h := s.Memory.ShortTermHistory
	if len(h) != 4 || h[len(h)-1].Content != "message 4" || s.HistorySeq != 6 {
		t.Fatalf("history = %+v (seq %d)", h, s.HistorySeq)
	}
	sum, _ := s.Memory.WorkingVariables["history_summary"].(string)
	if !strings.Contains(sum, "message 0") || !strings.Contains(sum, "[t2 assistant]") {
		t.Fatalf("summary = %q", sum)
	}
}

// Events arriving during one save ride on the next.
func TestGroupCommit(t *testing.T) {
	e := newEnv(t)
	e.store.delay = 3 * time.Millisecond
	e.cfg.Brain = agent.Brain(blockBrain{release: make(chan struct{})})
	rt := e.start()
	before := e.store.saves
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if res := submit(t, rt, fmt.Sprint("t", i), "x"); res.Err != nil {
				t.Error(res.Err)
			}
		}(i)
	}
	wg.Wait()
	saves := e.store.saves - before
	if saves >= 50 {
		t.Fatalf("100 concurrent tasks took %d saves; group commit should need far fewer", saves)
	}
	if q := len(e.store.stored(t, "a1").EventQueueBackup); q != 100 {
		t.Fatalf("queue = %d, want 100", q)
	}
	t.Logf("100 tasks made durable in %d saves", saves)
	close(e.cfg.Brain.(blockBrain).release)
}

func TestSaveFailureIsNotAcknowledged(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	e.store.mu.Lock()
	e.store.fail = errors.New("disk full")
	e.store.mu.Unlock()
	res := submit(t, rt, "t1", "x")
	if res.Err == nil || !strings.Contains(res.Err.Error(), "disk full") {
		t.Fatalf("submit with failing store = %+v", res)
	}
	<-rt.Done()
	if rt.Err() == nil {
		t.Fatal("runtime did not stop on a failed save")
	}
	if s := e.store.stored(t, "a1"); len(s.EventQueueBackup) != 0 {
		t.Fatal("store changed")
	}
}

func TestStopSavesStopped(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	submit(t, rt, "t1", "x")
	waitTask(t, rt, "t1")
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := e.store.stored(t, "a1"); s.Status != agent.StatusStopped {
		t.Fatalf("status after stop = %s", s.Status)
	}
	if res := submit(t, rt, "t2", "x"); !errors.Is(res.Err, agent.ErrStopped) {
		t.Fatalf("submit after stop = %+v", res)
	}
}

func TestTaskOutcomes(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxQueue = 1000
	rt := e.start()
	cases := []struct {
		name   string
		input  any
		status string
		check  func(agent.TaskState) bool
	}{
		{"sleep", map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": 1}}}}, agent.ResultDone,
			func(s agent.TaskState) bool { return strings.Contains(string(s.Output), `"slept_ms":1`) }},
		{"unknown tool", map[string]any{"call": []map[string]any{{"tool": "rm_rf"}}}, agent.ResultDone,
			func(s agent.TaskState) bool { return strings.Contains(string(s.Output), "not available") }},
		{"escape", appendCall("../x", "no"), agent.ResultDone,
			func(s agent.TaskState) bool { return strings.Contains(string(s.Output), "leaves the artifacts") }},
		{"bad script", map[string]any{"call": "x"}, agent.ResultFailed,
			func(s agent.TaskState) bool { return strings.Contains(s.Error, "bad call list") }},
		{"object", map[string]any{"a": 1}, agent.ResultDone,
			func(s agent.TaskState) bool { return string(s.Output) == `{"a":1}` }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprint("c", i)
			submit(t, rt, id, tc.input)
			st := waitTask(t, rt, id)
			if st.Status != tc.status || !tc.check(st) {
				t.Fatalf("state = %+v", st)
			}
		})
	}
	ev, _ := agent.TaskEvent(&agent.Task{TaskID: "late", Input: json.RawMessage(`"x"`), Deadline: "2001-01-01T00:00:00Z"}, "test", 1)
	rt.Submit(context.Background(), ev)
	if st := waitTask(t, rt, "late"); st.Status != agent.ResultFailed || !strings.Contains(st.Error, "deadline") {
		t.Fatalf("late = %+v", st)
	}
}

func TestResultSeqStartsAtOne(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	submit(t, rt, "t1", "x")
	waitTask(t, rt, "t1")
	s := e.store.stored(t, "a1")
	if s.NextResultSeq != 2 {
		t.Fatalf("next_result_seq = %d after one result, want 2 (the first result is seq 1)", s.NextResultSeq)
	}
}

// BenchmarkHydrate measures starting an agent whose stored history is over
// its context budget by the given number of messages: everything over the
// budget is folded into the summary before the agent serves anything.
func BenchmarkHydrate(b *testing.B) {
	const budget = 100
	for _, over := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("over=%d", over), func(b *testing.B) {
			store := newJSONStore()
			s := agent.New("a1", 1)
			for i := 0; i < budget+over; i++ {
				s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory,
					agent.Message{Role: "user", Content: strings.Repeat("m", 200), TaskID: fmt.Sprint("t", i)})
			}
			stored, err := agent.Encode(s)
			if err != nil {
				b.Fatal(err)
			}
			echo, err := brain.New(design.Brain{Provider: "echo"})
			if err != nil {
				b.Fatal(err)
			}
			cfg := agent.Config{AgentID: "a1", Store: store, Brain: echo, MaxMessages: budget,
				ArtifactsDir: b.TempDir(), Log: zerolog.Nop()}
			for b.Loop() {
				b.StopTimer()
				store.data["a1"] = stored
				b.StartTimer()
				rt, err := agent.Start(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = rt.Stop(context.Background())
				b.StartTimer()
			}
		})
	}
}

// Many clients waiting on many tasks each get their own task's result.
func TestWaitTaskConcurrent(t *testing.T) {
	rt := newEnv(t).start()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := fmt.Sprint("c", i)
			if res := submit(t, rt, id, fmt.Sprint("in ", i)); res.Err != nil {
				errs <- res.Err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, ok, err := rt.WaitTask(ctx, id)
			if err != nil || !ok || st.Status != "done" || string(st.Output) != fmt.Sprintf("%q", fmt.Sprint("in ", i)) {
				errs <- fmt.Errorf("task %s: %+v %v %v", id, st, ok, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok, err := rt.WaitTask(ctx, "never-sent"); ok || err != nil {
		t.Fatalf("unknown task: found=%v err=%v", ok, err)
	}
}

// The host resolves the tools; the runtime refuses a list it cannot use.
func TestStartRefusesBadTools(t *testing.T) {
	sleep := tool.MustResolve("sleep_ms")[0]
	for name, tools := range map[string][]tool.Tool{
		"twice":  {sleep, sleep},
		"no run": {{Name: "x"}},
		"noname": {{Run: sleep.Run}},
	} {
		e := newEnv(t)
		e.cfg.Tools = tools
		if rt, err := agent.Start(context.Background(), e.cfg); err == nil {
			_ = rt.Stop(context.Background())
			t.Errorf("%s: started", name)
		}
	}
}

// slowBrain is the echo brain without Quick: it stands for a model.
type slowBrain struct{ agent.Brain }

// gateTool is an idempotent tool that runs until its gate opens.
func gateTool(entered chan<- struct{}, gate <-chan struct{}) tool.Tool {
	return tool.Tool{Name: "gate", Idempotent: true, Run: func(ctx context.Context, _ tool.Env, _ json.RawMessage) (json.RawMessage, error) {
		entered <- struct{}{}
		select {
		case <-gate:
			return json.RawMessage(`"open"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

// A task of a quick brain whose tools are idempotent is accepted, run and
// finished in one save; a slow brain's task is saved when accepted and
// again when finished, and each reply of it before its calls run; a
// non-idempotent tool's intent is saved before it runs.
func TestSavesPerTask(t *testing.T) {
	echo, err := brain.New(design.Brain{Provider: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	sleep := map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": 0}}}}
	cases := []struct {
		name      string
		brain     agent.Brain
		quickWait time.Duration
		input     any
		saves     int
	}{
		{"quick: answer", echo, time.Minute, "hello", 1},
		{"quick: idempotent tool", echo, time.Minute, sleep, 1},
		{"quick: non-idempotent tool", echo, time.Minute, appendCall("log.txt", "x"), 2},
		{"quick path off", echo, -1, "hello", 2},
		{"slow: answer", slowBrain{echo}, time.Minute, "hello", 2},
		{"slow: idempotent tool", slowBrain{echo}, time.Minute, sleep, 3},
		{"slow: non-idempotent tool", slowBrain{echo}, time.Minute, appendCall("log.txt", "x"), 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Brain = tc.brain
			e.cfg.QuickWait = tc.quickWait
			var saved []*agent.Snapshot
			e.cfg.AfterSave = func(s *agent.Snapshot) { saved = append(saved, s.Clone()) }
			rt := e.start()
			if res := submit(t, rt, "t1", tc.input); res.Err != nil || res.State.Status != agent.TaskQueued {
				t.Fatalf("submit: %+v", res)
			}
			if st := waitTask(t, rt, "t1"); st.Status != agent.ResultDone {
				t.Fatalf("state = %+v", st)
			}
			snap, _ := rt.Snapshot(context.Background()) // after the loop's last save
			if n := len(saved) - 1; n != tc.saves || snap.TickIndex != 1 {
				t.Fatalf("%d saves for one task (tick %d), want %d", n, snap.TickIndex, tc.saves)
			}
			// The first save after hydration holds the event, acknowledged
			// only once it is durable.
			if first := saved[1]; first.RecentEventIDs[0] != "t1" {
				t.Fatalf("first save after hydration: %+v", first)
			}
			if last := saved[len(saved)-1]; len(last.EventQueueBackup) != 0 || last.TickIndex != 1 {
				t.Fatalf("last save: %+v", last)
			}
		})
	}
}

// A quick brain's tick that outlasts QuickWait (a slow idempotent tool) has
// its event saved and acknowledged while it runs; the outcome is saved
// after.
func TestQuickWaitRunsOut(t *testing.T) {
	e := newEnv(t)
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	e.cfg.Tools = append(e.cfg.Tools, gateTool(entered, gate))
	e.cfg.QuickWait = 5 * time.Millisecond
	var saves []*agent.Snapshot
	var mu sync.Mutex
	e.cfg.AfterSave = func(s *agent.Snapshot) { mu.Lock(); saves = append(saves, s.Clone()); mu.Unlock() }
	rt := e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, _ := json.Marshal(map[string]any{"call": []map[string]any{{"tool": "gate"}}})
	ev, _ := agent.TaskEvent(&agent.Task{TaskID: "t1", Input: in}, "test", time.Now().UnixMilli())
	res := rt.Submit(ctx, ev) // returns while the tool still runs
	if res.Err != nil {
		t.Fatalf("submit while the tool runs: %+v", res)
	}
	<-entered
	if st, ok, _ := rt.TaskState(context.Background(), "t1"); !ok || st.Status != agent.TaskRunning {
		t.Fatalf("state while the tool runs = %+v %v", st, ok)
	}
	mu.Lock()
	if s := saves[len(saves)-1]; len(s.EventQueueBackup) != 1 || s.TickIndex != 0 {
		t.Fatalf("the acknowledged event is not durable: %+v", s)
	}
	mu.Unlock()
	close(gate)
	if st := waitTask(t, rt, "t1"); st.Status != agent.ResultDone {
		t.Fatalf("state = %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(saves) - 1; n != 2 {
		t.Fatalf("%d saves, want 2 (accepted, finished)", n)
	}
}

// notWithin reports whether nothing arrived on ch within d: it waits for
// something that must not happen.
func notWithin[T any](ch <-chan T, d time.Duration) bool {
	select {
	case <-ch:
		return false
	case <-time.After(d):
		return true
	}
}

// A duplicate of an event that is accepted but not yet durable (its quick
// tick holds the save) is answered only after that save.
func TestDuplicateWaitsForTheSave(t *testing.T) {
	e := newEnv(t)
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	e.cfg.Tools = append(e.cfg.Tools, gateTool(entered, gate))
	e.cfg.QuickWait = time.Minute
	rt := e.start()
	in := map[string]any{"call": []map[string]any{{"tool": "gate"}}}
	first, dup := make(chan agent.SubmitResult, 1), make(chan agent.SubmitResult, 1)
	go func() { first <- submit(t, rt, "t1", in) }()
	<-entered // t1 is accepted, its tick runs, nothing is saved
	go func() { dup <- submit(t, rt, "t1", in) }()
	if !notWithin(dup, 100*time.Millisecond) {
		t.Fatal("the duplicate was answered before the event was durable")
	}
	if len(e.store.stored(t, "a1").RecentEventIDs) != 0 {
		t.Fatal("saved while the quick tick held the save")
	}
	close(gate)
	if r := <-first; r.Err != nil || r.Duplicate {
		t.Fatalf("first: %+v", r)
	}
	r := <-dup
	if r.Err != nil || !r.Duplicate || r.State.Status != agent.ResultDone {
		t.Fatalf("duplicate: %+v", r)
	}
	if s := e.store.stored(t, "a1"); s.TickIndex != 1 || len(s.EventQueueBackup) != 0 {
		t.Fatalf("stored: %+v", s)
	}
}

// On the quick path a save waits for as many events as the last commit
// acknowledged: concurrent clients that each send their next task once
// answered share one save per round.
func TestQuickGroupCommit(t *testing.T) {
	e := newEnv(t)
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	e.cfg.Tools = append(e.cfg.Tools, gateTool(entered, gate))
	e.cfg.QuickWait = time.Minute // the wait ends by count, never by time
	var saves atomic.Int64
	e.cfg.AfterSave = func(*agent.Snapshot) { saves.Add(1) }
	rt := e.start()
	round := func(ids ...string) <-chan agent.SubmitResult {
		out := make(chan agent.SubmitResult, len(ids))
		for _, id := range ids {
			go func() { out <- submit(t, rt, id, "x") }()
		}
		return out
	}
	queued := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := rt.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(s.RecentEventIDs) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d events accepted, want %d", len(s.RecentEventIDs), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Round 1: three clients, held together by a tick on the gate.
	first := make(chan agent.SubmitResult, 1)
	in := map[string]any{"call": []map[string]any{{"tool": "gate"}}}
	go func() { first <- submit(t, rt, "g", in) }()
	<-entered
	r1 := round("a1", "a2")
	queued(3)
	before := saves.Load()
	close(gate)
	for _, ch := range []<-chan agent.SubmitResult{first, r1, r1} {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if n := saves.Load() - before; n != 1 {
		t.Fatalf("round 1: %d saves for three tasks, want 1", n)
	}
	// Round 2: the first client's next task waits for the other two.
	before = saves.Load()
	r2 := round("b1")
	if !notWithin(r2, 100*time.Millisecond) {
		t.Fatal("the save did not wait for the clients of the last round")
	}
	r3 := round("b2", "b3")
	for _, ch := range []<-chan agent.SubmitResult{r2, r3, r3} {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if n := saves.Load() - before; n != 1 {
		t.Fatalf("round 2: %d saves for three tasks, want 1", n)
	}
	for _, id := range []string{"g", "a1", "a2", "b1", "b2", "b3"} {
		if st := waitTask(t, rt, id); st.Status != agent.ResultDone {
			t.Fatalf("%s = %+v", id, st)
		}
	}
}
