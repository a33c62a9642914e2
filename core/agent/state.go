package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// state is the agent's snapshot with what the kernel derives from it (the
// set of recent event ids, the bytes of the window). Its methods are the
// kernel's state transitions: pure, with no I/O, no goroutine, no lock and
// no clock of their own, so that table tests drive them directly. The
// runtime's goroutine owns one state and saves state.snap after changing it.
type state struct {
	snap      *Snapshot
	known     map[string]struct{} // the ids in snap.RecentEventIDs
	histBytes int                 // bytes of content in snap's window
	lim       limits
}

// limits are the bounds a state keeps, from Config.
type limits struct {
	agentID     string
	maxMessages int // window bound in messages
	maxTokens   int // approximate window bound in tokens (4 bytes each); 0 = none
	recentIDs   int // recent_event_ids bound
	maxQueue    int // queued events before accept refuses
}

func (c *Config) limits() limits {
	return limits{agentID: c.AgentID, maxMessages: c.MaxMessages, maxTokens: c.MaxTokens,
		recentIDs: c.RecentIDs, maxQueue: c.MaxQueue}
}

// newState wraps a snapshot: its nil lists become empty ones and the derived
// fields are computed from it.
func newState(s *Snapshot, lim limits) *state {
	if s.Memory.WorkingVariables == nil {
		s.Memory.WorkingVariables = map[string]any{}
	}
	if s.Memory.ShortTermHistory == nil {
		s.Memory.ShortTermHistory = []Message{}
	}
	if s.EventQueueBackup == nil {
		s.EventQueueBackup = []Event{}
	}
	st := &state{snap: s, known: make(map[string]struct{}, len(s.RecentEventIDs)), lim: lim}
	for _, id := range s.RecentEventIDs {
		st.known[id] = struct{}{}
	}
	for _, m := range s.Memory.ShortTermHistory {
		st.histBytes += len(m.Content)
	}
	return st
}

// accept appends an event to the queue and remembers its id. It refuses
// with ErrQueueFull when the queue is at its bound. The caller has checked
// that the event is no duplicate.
func (st *state) accept(ev Event) error {
	s := st.snap
	if len(s.EventQueueBackup) >= st.lim.maxQueue {
		return fmt.Errorf("%w (%d events)", ErrQueueFull, st.lim.maxQueue)
	}
	s.EventQueueBackup = append(s.EventQueueBackup, ev)
	if ev.ID != "" {
		st.remember(ev.ID)
	}
	return nil
}

// remember adds id to recent_event_ids, which is bounded by lim.recentIDs:
// it is trimmed in batches of a quarter of the bound, so that a busy agent
// does not copy the whole list on every event.
func (st *state) remember(id string) {
	s := st.snap
	s.RecentEventIDs = append(s.RecentEventIDs, id)
	st.known[id] = struct{}{}
	if over := len(s.RecentEventIDs) - st.lim.recentIDs; over > st.lim.recentIDs/4 {
		for _, old := range s.RecentEventIDs[:over] {
			delete(st.known, old)
		}
		s.RecentEventIDs = append([]string(nil), s.RecentEventIDs[over:]...)
		s.RecentSeq += uint64(over)
	}
}

// duplicate answers whether the event id was seen before, and the task's
// state. Beside the snapshot it asks, in this order: memory (the states
// this process knows: running, or finished and remembered) and index (the
// store's task index). An id older than recent_event_ids is a duplicate
// only when the index knows it; a recent id whose result nobody keeps any
// more has left retention and reports done.
func (st *state) duplicate(id string, memory, index func(id string) (TaskState, bool)) (TaskState, bool) {
	if _, seen := st.known[id]; !seen {
		return index(id)
	}
	s := st.snap
	for i := range s.Outbox {
		if s.Outbox[i].TaskID == id {
			return stateOf(&s.Outbox[i]), true
		}
	}
	if ts, ok := memory(id); ok {
		return ts, true
	}
	for _, ev := range s.EventQueueBackup {
		if ev.ID == id {
			return TaskState{TaskID: id, AgentID: st.lim.agentID, Status: TaskQueued}, true
		}
	}
	if ts, ok := index(id); ok {
		return ts, true
	}
	return TaskState{TaskID: id, AgentID: st.lim.agentID, Status: ResultDone}, true
}

// confirm drops the result with this seq from the outbox; it reports
// whether there was one.
func (st *state) confirm(seq uint64) bool {
	out := st.snap.Outbox
	for i := range out {
		if out[i].Seq == seq {
			if i == 0 {
				// Results are confirmed mostly in order: the oldest
				// leaves without copying the rest, as events leave the
				// queue. Copying them at every confirmation cost a busy
				// agent a slice of the whole outbox per task.
				st.snap.Outbox = out[1:]
			} else {
				st.snap.Outbox = append(out[:i:i], out[i+1:]...)
			}
			return true
		}
	}
	return false
}

// finish applies a tick's outcome: the event leaves the queue, the history
// and variables are updated, tick_index advances and the result, numbered,
// enters the outbox. It returns that result. nowMs is its finished_at.
func (st *state) finish(out *outcome, nowMs int64) Result {
	s := st.snap
	if len(s.EventQueueBackup) > 0 && s.EventQueueBackup[0].ID == out.ev.ID {
		s.EventQueueBackup = s.EventQueueBackup[1:]
		s.QueueSeq++
	}
	s.PendingAction = nil
	s.Turn = nil
	s.TickIndex++
	for _, m := range out.messages {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, m)
		st.histBytes += len(m.Content)
	}
	st.enforceBudget(out.summary)
	vars := s.Memory.WorkingVariables
	if out.usage != (Usage{}) {
		vars["tokens_prompt"] = numberVar(vars["tokens_prompt"]) + out.usage.PromptTokens
		vars["tokens_completion"] = numberVar(vars["tokens_completion"]) + out.usage.CompletionTokens
		vars["last_task_tokens"] = out.usage.PromptTokens + out.usage.CompletionTokens
	}
	res := out.result
	if s.NextResultSeq == 0 {
		// Sequence numbers start at 1: stores keep "the highest seq
		// indexed" as their mark, where 0 means none.
		s.NextResultSeq = 1
	}
	res.Seq = s.NextResultSeq
	s.NextResultSeq++
	res.AgentID = st.lim.agentID
	res.TickIndex = s.TickIndex
	res.FinishedAt = nowMs
	s.Outbox = append(s.Outbox, res)
	applySession(s, out)
	vars["last_task_id"] = res.TaskID
	vars["tasks_"+res.Status] = numberVar(vars["tasks_"+res.Status]) + 1
	if s.Status != StatusStarting && s.Status != StatusRecovering {
		_ = s.Transition(StatusWaitingForEvent)
	}
	return res
}

// abort puts a tick that was stopped before it finished back to waiting:
// its event stays first in the queue, its saved progress stays in the turn.
func (st *state) abort() {
	st.snap.PendingAction = nil
	_ = st.snap.Transition(StatusWaitingForEvent)
}

// intend records a tick's progress and, when action is not nil, the
// pending action of the non-idempotent tool about to run. Without one, a
// pending action still recorded belongs to a tool that has finished (its
// result is in the turn).
func (st *state) intend(turn *TurnLog, action *PendingAction) {
	s := st.snap
	s.Turn = turn
	if action != nil {
		p := *action
		s.PendingAction = &p
		_ = s.Transition(StatusRunningTool)
	} else if s.PendingAction != nil {
		s.PendingAction = nil
		_ = s.Transition(StatusThinking)
	}
}

// resolvePending turns the task whose non-idempotent tool was interrupted
// into an unknown_outcome result; the tool is never run again. why, when not
// empty, is added to the result's error. It returns false, and only drops
// the pending action, when the action names no queued event.
func (st *state) resolvePending(nowMs int64, why string) bool {
	s := st.snap
	p := s.PendingAction
	s.PendingAction = nil
	if len(s.EventQueueBackup) == 0 || s.EventQueueBackup[0].ID != p.EventID {
		return false
	}
	ev := s.EventQueueBackup[0]
	out, _ := json.Marshal(map[string]any{
		"completed": p.Completed,
		"unknown":   map[string]any{"tool": p.Tool, "args": p.Args, "step": p.Step},
	})
	msg := fmt.Sprintf("the process stopped while %s was running; it may or may not have taken effect, and it is not run again", p.Tool)
	if why != "" {
		msg += " (" + why + ")"
	}
	st.finish(&outcome{
		ev:       ev,
		result:   Result{TaskID: p.TaskID, Status: ResultUnknownOutcome, Output: out, Error: msg, Source: ev.Source},
		messages: []Message{{Role: "assistant", Content: "unknown outcome: " + msg, TaskID: p.TaskID}},
	}, nowMs)
	return true
}

// pendingCall finds the interrupted non-idempotent call in the saved
// progress of its task: the last step, and the index of the call, which has
// no result yet. ok is false when there is no saved progress holding it.
func (st *state) pendingCall() (step *TurnStep, i int, ok bool) {
	s := st.snap
	p := s.PendingAction
	l := s.Turn
	if l == nil || l.EventID != p.EventID || len(l.Steps) == 0 ||
		len(s.EventQueueBackup) == 0 || s.EventQueueBackup[0].ID != p.EventID {
		return nil, 0, false
	}
	step = &l.Steps[len(l.Steps)-1]
	i = len(step.Results)
	if i >= len(step.Calls) || step.Calls[i].Tool != p.Tool {
		return nil, 0, false
	}
	return step, i, true
}

// pendingToResult turns an interrupted non-idempotent call into a tool
// result saying its outcome is unknown, in the saved progress of its task,
// so that the brain sees it at its next step. The calls after it in the same
// reply are not run: they may depend on it. It returns false, changing
// nothing, when there is no saved progress to put it in.
func (st *state) pendingToResult() bool {
	return st.settlePending(func(step *TurnStep, i int, p *PendingAction) {
		step.Results = append(step.Results, ToolResult{CallID: step.Calls[i].ID, Tool: p.Tool,
			Error: UnknownOutcomeMessage(p.Tool)})
		notRun(step)
	})
}

// pendingToApproval puts an interrupted non-idempotent call before an
// operator: it waits in the saved progress of its task (Turn.Awaiting),
// still without a result, and the task stays first in the queue; its next
// tick raises the approval and goes on once it is decided. It returns
// false, changing nothing, when there is no saved progress to put it in.
func (st *state) pendingToApproval() bool {
	return st.settlePending(func(step *TurnStep, i int, p *PendingAction) {
		st.snap.Turn.Awaiting = &AwaitingDecision{CallID: step.Calls[i].ID, Tool: p.Tool, Args: p.Args}
	})
}

// settlePending hands the interrupted call (call i of step) to apply,
// clears the pending action and counts the unknown outcome. It returns
// false, changing nothing, when there is no saved progress to put it in.
func (st *state) settlePending(apply func(step *TurnStep, i int, p *PendingAction)) bool {
	s := st.snap
	p := s.PendingAction
	step, i, ok := st.pendingCall()
	if !ok {
		return false
	}
	s.PendingAction = nil
	apply(step, i, p)
	vars := s.Memory.WorkingVariables
	vars["unknown_outcomes"] = numberVar(vars["unknown_outcomes"]) + 1
	return true
}

// notRun gives every call of step after the first without a result (the
// one whose outcome is unknown, which has just been given one) a result
// saying it was not run.
func notRun(step *TurnStep) {
	for _, c := range step.Calls[len(step.Results):] {
		step.Results = append(step.Results, ToolResult{CallID: c.ID, Tool: c.Tool,
			Error: "not run: an earlier call of the same reply has an unknown outcome"})
	}
}

// UnknownOutcomeMessage is the tool result the brain sees for a call of tool
// that was interrupted by a crash.
func UnknownOutcomeMessage(tool string) string {
	return "outcome unknown: the agent stopped while " + tool + " was running, so it may or may not have " +
		"taken effect; it is not run again by itself. Check before retrying."
}

// enforceBudget drops the oldest messages beyond the context budget and
// summarises them into working variables: with ms, the brain's summary of
// exactly those messages, when it covers them; otherwise one clipped line
// per message folded into the running summary.
func (st *state) enforceBudget(ms *modelSummary) {
	s := st.snap
	h := s.Memory.ShortTermHistory
	drop := 0
	bytes := st.histBytes
	for st.lim.overBudget(len(h)-drop, bytes) {
		bytes -= len(h[drop].Content)
		drop++
	}
	if drop == 0 {
		return
	}
	vars := s.Memory.WorkingVariables
	if ms != nil && ms.note == "" && ms.covers == drop {
		// The brain summarised exactly what leaves the window.
		vars["history_summary"] = ms.text
		delete(vars, "history_summary_note")
	} else {
		summary, _ := vars["history_summary"].(string)
		vars["history_summary"] = foldSummary(summary, h[:drop])
		if ms != nil && ms.note != "" {
			vars["history_summary_note"] = ms.note
		}
	}
	vars["history_dropped"] = numberVar(vars["history_dropped"]) + int64(drop)
	s.Memory.ShortTermHistory = h[drop:]
	s.HistorySeq += uint64(drop)
	st.histBytes = bytes
}

// overBudget reports whether a window of n messages holding bytes bytes of
// content is larger than the context budget.
func (l limits) overBudget(n, bytes int) bool {
	return n > l.maxMessages || (l.maxTokens > 0 && bytes/4 > l.maxTokens && n > 1)
}

const maxSummary = 2048

// foldSummary appends a line per dropped message to the running summary and
// keeps its last maxSummary bytes, cut at a character boundary. Only the
// newest lines can survive the cut, so it walks the dropped messages from
// the newest and stops once it has enough: its cost does not grow with the
// number of messages dropped at once (hydrating an agent whose stored
// history is far over a new, smaller budget drops thousands).
func foldSummary(old string, dropped []Message) string {
	var lines []string
	n := 0
	for i := len(dropped) - 1; i >= 0 && n < maxSummary; i-- {
		l := summarize(dropped[i])
		lines = append(lines, l)
		n += len(l)
	}
	if n < maxSummary {
		if keep := maxSummary - n; len(old) > keep {
			old = old[len(old)-keep:]
		}
		lines = append(lines, old)
		n += len(old)
	}
	var b strings.Builder
	b.Grow(n)
	for i := len(lines) - 1; i >= 0; i-- {
		b.WriteString(lines[i])
	}
	sum := b.String()
	if len(sum) > maxSummary {
		sum = sum[len(sum)-maxSummary:]
	}
	for len(sum) > 0 && !utf8.RuneStart(sum[0]) {
		sum = sum[1:]
	}
	return sum
}

// summarize folds one message that left the window into a line of the
// running summary kept in working variables.
func summarize(m Message) string {
	c := m.Content
	if len(c) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(c[cut]) {
			cut--
		}
		c = c[:cut] + "…"
	}
	if m.TaskID != "" {
		return fmt.Sprintf("[%s %s] %s\n", m.TaskID, m.Role, c)
	}
	return fmt.Sprintf("[%s] %s\n", m.Role, c)
}

func numberVar(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	}
	return 0
}

func stateOf(res *Result) TaskState {
	return TaskState{TaskID: res.TaskID, AgentID: res.AgentID, Status: res.Status,
		Output: res.Output, Error: res.Error, TickIndex: res.TickIndex}
}

// copyForSave returns a copy of the state that no later change of st
// reaches, for a save that runs while the runtime goes on (Runtime.launch).
// It costs the working variables and the tick's progress, not the lists:
// the runtime only appends to a list, drops from its front or replaces it
// whole, never writes an element in place, so a list clipped to its length
// (a full slice expression, which makes an append copy) stays as it was.
// TestCopyForSave holds the state's changes to that.
func (st *state) copyForSave() *Snapshot {
	s := st.snap
	c := *s
	h := s.Memory.ShortTermHistory
	c.Memory.ShortTermHistory = h[:len(h):len(h)]
	c.Memory.WorkingVariables = cloneVars(s.Memory.WorkingVariables)
	c.EventQueueBackup = s.EventQueueBackup[:len(s.EventQueueBackup):len(s.EventQueueBackup)]
	c.Outbox = s.Outbox[:len(s.Outbox):len(s.Outbox)]
	c.RecentEventIDs = s.RecentEventIDs[:len(s.RecentEventIDs):len(s.RecentEventIDs)]
	if s.PendingAction != nil {
		p := *s.PendingAction
		p.Completed = p.Completed[:len(p.Completed):len(p.Completed)]
		c.PendingAction = &p
	}
	c.Turn = s.Turn.Clone()
	return &c
}
