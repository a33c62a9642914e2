package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The kernel's state transitions, driven directly: no goroutine, no store.

func testState(lim limits) *state {
	if lim.agentID == "" {
		lim.agentID = "a1"
	}
	if lim.maxMessages == 0 {
		lim.maxMessages = 200
	}
	if lim.recentIDs == 0 {
		lim.recentIDs = 1024
	}
	if lim.maxQueue == 0 {
		lim.maxQueue = 100
	}
	s := New(lim.agentID, 1)
	_ = s.Transition(StatusWaitingForEvent)
	return newState(s, lim)
}

func taskEv(id string) Event { return Event{ID: id, Type: "task", Payload: json.RawMessage(`{}`)} }

func TestStateAccept(t *testing.T) {
	st := testState(limits{maxQueue: 2})
	for _, id := range []string{"t1", "t2"} {
		if err := st.accept(taskEv(id)); err != nil {
			t.Fatal(err)
		}
	}
	err := st.accept(taskEv("t3"))
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "2 events") {
		t.Fatalf("third event: %v, want ErrQueueFull naming the bound", err)
	}
	if q := st.snap.EventQueueBackup; len(q) != 2 || q[0].ID != "t1" || q[1].ID != "t2" {
		t.Fatalf("queue = %+v", q)
	}
	if _, ok := st.known["t3"]; ok || !slices.Equal(st.snap.RecentEventIDs, []string{"t1", "t2"}) {
		t.Fatalf("a refused event was remembered: %v", st.snap.RecentEventIDs)
	}
	// An event without an id (a timer) is queued, not remembered.
	st = testState(limits{})
	if err := st.accept(Event{Type: "timer"}); err != nil || len(st.snap.RecentEventIDs) != 0 || len(st.snap.EventQueueBackup) != 1 {
		t.Fatalf("id-less event: %v %+v", err, st.snap)
	}
}

func TestStateRemember(t *testing.T) {
	cases := []struct {
		name      string
		bound, n  int
		wantIDs   []string
		wantSeq   uint64
		forgotten string
	}{
		{"under the bound", 4, 3, []string{"e0", "e1", "e2"}, 0, ""},
		{"over by a quarter: kept", 4, 5, []string{"e0", "e1", "e2", "e3", "e4"}, 0, ""},
		{"over by more: trimmed to the bound", 4, 6, []string{"e2", "e3", "e4", "e5"}, 2, "e1"},
		{"trimmed in batches", 8, 11, []string{"e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10"}, 3, "e2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := testState(limits{recentIDs: tc.bound})
			for i := range tc.n {
				st.remember(fmt.Sprint("e", i))
			}
			if !slices.Equal(st.snap.RecentEventIDs, tc.wantIDs) || st.snap.RecentSeq != tc.wantSeq {
				t.Fatalf("ids %v seq %d, want %v seq %d", st.snap.RecentEventIDs, st.snap.RecentSeq, tc.wantIDs, tc.wantSeq)
			}
			if len(st.known) != len(tc.wantIDs) {
				t.Fatalf("known has %d ids, want %d", len(st.known), len(tc.wantIDs))
			}
			if _, ok := st.known[tc.forgotten]; tc.forgotten != "" && ok {
				t.Fatalf("%s still known", tc.forgotten)
			}
		})
	}
}

func TestStateDuplicate(t *testing.T) {
	st := testState(limits{})
	for _, id := range []string{"queued", "outboxed", "running", "indexed", "gone"} {
		st.remember(id)
	}
	st.snap.EventQueueBackup = []Event{taskEv("running"), taskEv("queued")}
	st.snap.Outbox = []Result{{TaskID: "outboxed", AgentID: "a1", Status: ResultFailed, Error: "e", TickIndex: 3, Seq: 1}}
	memory := func(id string) (TaskState, bool) {
		if id == "running" {
			return TaskState{TaskID: id, AgentID: "a1", Status: TaskRunning}, true
		}
		return TaskState{}, false
	}
	index := func(id string) (TaskState, bool) {
		if id == "indexed" || id == "old" {
			return TaskState{TaskID: id, AgentID: "a1", Status: ResultDone, TickIndex: 2}, true
		}
		return TaskState{}, false
	}
	cases := []struct {
		id     string
		dup    bool
		status string
	}{
		{"new", false, ""},
		{"old", true, ResultDone}, // left recent_event_ids, the index knows it
		{"queued", true, TaskQueued},
		{"running", true, TaskRunning}, // memory before the queue
		{"outboxed", true, ResultFailed},
		{"indexed", true, ResultDone},
		{"gone", true, ResultDone}, // seen, its result left retention
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			ts, dup := st.duplicate(tc.id, memory, index)
			if dup != tc.dup || ts.Status != tc.status {
				t.Fatalf("duplicate(%s) = %+v, %v; want %v %q", tc.id, ts, dup, tc.dup, tc.status)
			}
			if dup && (ts.TaskID != tc.id || ts.AgentID != "a1") {
				t.Fatalf("state names %s of %s", ts.TaskID, ts.AgentID)
			}
		})
	}
}

func TestStateFinish(t *testing.T) {
	out := func(id, status string, usage Usage, msgs ...string) *outcome {
		o := &outcome{ev: taskEv(id), result: Result{TaskID: id, Status: status, Output: json.RawMessage(`"x"`)}, usage: usage}
		for _, m := range msgs {
			o.messages = append(o.messages, Message{Role: "assistant", Content: m, TaskID: id})
		}
		return o
	}
	cases := []struct {
		name      string
		queue     []string
		out       *outcome
		wantQueue []string
		wantSeq   uint64 // the result's seq
		vars      map[string]any
	}{
		{"head of the queue", []string{"t1", "t2"}, out("t1", ResultDone, Usage{}, "hello"), []string{"t2"}, 1,
			map[string]any{"last_task_id": "t1", "tasks_done": int64(1)}},
		{"not queued (resolved twice)", []string{"t2"}, out("t1", ResultFailed, Usage{}), []string{"t2"}, 1,
			map[string]any{"tasks_failed": int64(1)}},
		{"tokens counted", []string{"t1"}, out("t1", ResultDone, Usage{PromptTokens: 10, CompletionTokens: 5}, "a", "b"), []string{}, 1,
			map[string]any{"tokens_prompt": int64(10), "tokens_completion": int64(5), "last_task_tokens": int64(15)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := testState(limits{})
			for _, id := range tc.queue {
				if err := st.accept(taskEv(id)); err != nil {
					t.Fatal(err)
				}
			}
			st.snap.PendingAction = &PendingAction{EventID: "t1"}
			_ = st.snap.Transition(StatusThinking)
			queueSeq := st.snap.QueueSeq
			res := st.finish(tc.out, 77)
			s := st.snap
			var q []string
			for _, ev := range s.EventQueueBackup {
				q = append(q, ev.ID)
			}
			if !slices.Equal(q, tc.wantQueue) && !(len(q) == 0 && len(tc.wantQueue) == 0) {
				t.Fatalf("queue = %v, want %v", q, tc.wantQueue)
			}
			if removed := len(tc.queue) - len(q); s.QueueSeq != queueSeq+uint64(removed) {
				t.Fatalf("queue_seq %d after removing %d from %d", s.QueueSeq, removed, queueSeq)
			}
			if res.Seq != tc.wantSeq || s.NextResultSeq != tc.wantSeq+1 || res.TickIndex != 1 || s.TickIndex != 1 ||
				res.AgentID != "a1" || res.FinishedAt != 77 {
				t.Fatalf("result %+v, next seq %d, tick %d", res, s.NextResultSeq, s.TickIndex)
			}
			if len(s.Outbox) != 1 || s.Outbox[0].Seq != res.Seq || s.PendingAction != nil || s.Turn != nil || s.Status != StatusWaitingForEvent {
				t.Fatalf("snapshot after finish: %+v", s)
			}
			if len(s.Memory.ShortTermHistory) != len(tc.out.messages) {
				t.Fatalf("history %d messages, want %d", len(s.Memory.ShortTermHistory), len(tc.out.messages))
			}
			for k, v := range tc.vars {
				if got := s.Memory.WorkingVariables[k]; got != v {
					t.Errorf("%s = %v (%T), want %v", k, got, got, v)
				}
			}
			// A second result takes the next seq and the next tick.
			if res2 := st.finish(out("t9", ResultDone, Usage{}), 78); res2.Seq != res.Seq+1 || res2.TickIndex != 2 {
				t.Fatalf("second result %+v", res2)
			}
		})
	}
}

func TestStateBudget(t *testing.T) {
	msgs := func(n, size int) []Message {
		ms := make([]Message, n)
		for i := range ms {
			ms[i] = Message{Role: "user", Content: fmt.Sprintf("m%d %s", i, strings.Repeat("x", size)), TaskID: fmt.Sprint("t", i)}
		}
		return ms
	}
	cases := []struct {
		name        string
		lim         limits
		history     []Message
		summary     *modelSummary
		wantKept    int
		wantSummary string // a substring of history_summary
		wantNote    bool
	}{
		{"within", limits{maxMessages: 5}, msgs(5, 1), nil, 5, "", false},
		{"messages over", limits{maxMessages: 3}, msgs(5, 1), nil, 3, "[t1 user] m1", false},
		{"tokens over", limits{maxMessages: 100, maxTokens: 10}, msgs(4, 20), nil, 1, "[t2 user] m2", false},
		{"tokens: the last message stays", limits{maxMessages: 100, maxTokens: 1}, msgs(2, 100), nil, 1, "[t0 user]", false},
		{"model summary of exactly what leaves", limits{maxMessages: 3}, msgs(5, 1), &modelSummary{text: "two greetings", covers: 2}, 3, "two greetings", false},
		{"model summary of something else", limits{maxMessages: 3}, msgs(5, 1), &modelSummary{text: "nope", covers: 1}, 3, "[t1 user] m1", false},
		{"no model summary: a note", limits{maxMessages: 3}, msgs(5, 1), &modelSummary{covers: 2, note: "model down"}, 3, "[t0 user] m0", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := testState(tc.lim)
			st.snap.Memory.ShortTermHistory = tc.history
			st = newState(st.snap, st.lim)
			st.enforceBudget(tc.summary)
			s := st.snap
			h := s.Memory.ShortTermHistory
			if len(h) != tc.wantKept || h[len(h)-1] != tc.history[len(tc.history)-1] {
				t.Fatalf("kept %d messages, want the newest %d", len(h), tc.wantKept)
			}
			dropped := len(tc.history) - tc.wantKept
			if s.HistorySeq != uint64(dropped) {
				t.Fatalf("history_seq %d, want %d", s.HistorySeq, dropped)
			}
			bytes := 0
			for _, m := range h {
				bytes += len(m.Content)
			}
			if st.histBytes != bytes {
				t.Fatalf("histBytes %d, want %d", st.histBytes, bytes)
			}
			vars := s.Memory.WorkingVariables
			sum, _ := vars["history_summary"].(string)
			if !strings.Contains(sum, tc.wantSummary) || (dropped == 0) != (sum == "") {
				t.Fatalf("summary %q, want it to hold %q", sum, tc.wantSummary)
			}
			if dropped > 0 && vars["history_dropped"] != int64(dropped) {
				t.Fatalf("history_dropped = %v", vars["history_dropped"])
			}
			if _, note := vars["history_summary_note"]; note != tc.wantNote {
				t.Fatalf("note = %v, want %v", vars["history_summary_note"], tc.wantNote)
			}
		})
	}
}

func TestStateRecovery(t *testing.T) {
	step := func(results int) TurnStep {
		s := TurnStep{Calls: []Call{{ID: "c1", Tool: "file_append"}, {ID: "c2", Tool: "sleep_ms"}}}
		for i := range results {
			s.Results = append(s.Results, ToolResult{CallID: s.Calls[i].ID, Tool: s.Calls[i].Tool})
		}
		return s
	}
	cases := []struct {
		name         string
		queue        []string
		turn         *TurnLog
		toModel      bool // pendingToResult
		wantOK       bool
		wantFinished bool // the task ended unknown_outcome
	}{
		{"end the task", []string{"t1"}, nil, false, true, true},
		{"end the task: no such event", []string{"t2"}, nil, false, false, false},
		{"tell the model", []string{"t1"}, &TurnLog{EventID: "t1", Steps: []TurnStep{step(0)}}, true, true, false},
		{"tell the model: no saved progress", []string{"t1"}, nil, true, false, false},
		{"tell the model: the call is not next", []string{"t1"}, &TurnLog{EventID: "t1", Steps: []TurnStep{step(1)}}, true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := testState(limits{})
			for _, id := range tc.queue {
				_ = st.accept(taskEv(id))
			}
			s := st.snap
			s.Turn = tc.turn
			s.PendingAction = &PendingAction{EventID: "t1", TaskID: "t1", Tool: "file_append"}
			var ok bool
			if tc.toModel {
				ok = st.pendingToResult()
			} else {
				ok = st.resolvePending(5, "")
			}
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			finished := len(s.Outbox) == 1 && s.Outbox[0].Status == ResultUnknownOutcome && strings.Contains(s.Outbox[0].Error, "file_append")
			if finished != tc.wantFinished || (finished && (len(s.EventQueueBackup) != 0 || s.TickIndex != 1)) {
				t.Fatalf("finished = %v, snapshot %+v", finished, s)
			}
			switch {
			case tc.toModel && ok:
				last := s.Turn.Steps[0].Results
				if s.PendingAction != nil || len(last) != 2 || last[0].Error != UnknownOutcomeMessage("file_append") ||
					!strings.Contains(last[1].Error, "not run") || s.Memory.WorkingVariables["unknown_outcomes"] != int64(1) {
					t.Fatalf("told the model: %+v %+v", s.PendingAction, last)
				}
			case tc.toModel:
				if s.PendingAction == nil {
					t.Fatal("pendingToResult changed the snapshot without succeeding")
				}
			default:
				if s.PendingAction != nil {
					t.Fatal("resolvePending left the pending action")
				}
			}
		})
	}
}

func TestIsNotFound(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{ErrNotFound, true},
		{fmt.Errorf("bbolt: task t1 of a1: %w", ErrNotFound), true},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", ErrNotFound)), true},
		{errors.New("not found"), false}, // the same words, another error
		{fmt.Errorf("redis: %w", errors.New("not found")), false},
		{errors.New("connection refused"), false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := isNotFound(tc.err); got != tc.want {
			t.Errorf("isNotFound(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
