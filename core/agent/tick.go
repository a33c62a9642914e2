package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/tool"
)

// maxMessageBytes bounds one history message; longer content is cut.
const maxMessageBytes = 16 << 10

// tickInput is what the runtime hands a tick: the event, a read-only view
// of the window, and the saved progress of the task when an earlier process
// got part of the way.
type tickInput struct {
	ev        Event
	history   []Message
	histBytes int      // bytes of history's contents
	memory    string   // working_variables.history_summary
	resume    string   // the resume context of the task's session (Turn.Resume), or ""
	turn      *TurnLog // nil, or this event's saved progress (a copy)
	// inline: the tick runs on the runtime's goroutine (tickInline) and
	// gives up, having changed and reported nothing, where it would wait:
	// a tool, an operator's decision, an unreachable model.
	inline bool
}

// tick runs one event through the brain and the tools, off the runtime's
// goroutine, and hands the outcome back. It never touches r.snap.
func (r *Runtime) tick(in tickInput) {
	r.cur.begin(in.ev.ID, r.cfg.Now())
	out := r.thinkAndAct(in)
	if !out.aborted {
		r.summarizeOverflow(in, out)
	}
	r.cur.end()
	r.doneCh <- out
}

// tickInline runs a quick brain's tick on the runtime's goroutine, the
// caller, and returns its outcome; nil when the tick would wait (its brain
// called a tool, or it waits for an operator or a model server), which it
// then runs on a goroutine of its own from the start, as tick does. A quick
// brain answers the same turn the same (Quick), so the attempt that gave up
// costs nothing but the asking. Handing every echo task to a new goroutine
// and its outcome back cost a goroutine's start and two hand-offs per task.
func (r *Runtime) tickInline(in tickInput) *outcome {
	r.cur.begin(in.ev.ID, r.cfg.Now())
	in.inline = true
	out := r.thinkAndAct(in)
	if out == nil {
		in.inline = false
		go r.tick(in)
		return nil
	}
	r.cur.end()
	return out
}

// thinkAndAct runs one event: it asks the brain, runs the tools the brain
// calls (each non-idempotent one only after its intent is durable), and
// asks again with their results, until the brain answers, a step limit or
// deadline ends the task, or the runtime stops (aborted).
func (r *Runtime) thinkAndAct(in tickInput) *outcome {
	ev := in.ev
	out := &outcome{ev: ev}
	if ev.Type != "task" {
		out.result = Result{TaskID: ev.ID, Status: ResultFailed, Source: ev.Source,
			Error: fmt.Sprintf("unsupported event type %q", ev.Type)}
		return out
	}
	var task Task
	if ev.task != nil {
		task = *ev.task // decoded when it was received (TaskEvent)
	} else if err := json.Unmarshal(ev.Payload, &task); err != nil {
		out.result = Result{TaskID: ev.ID, Status: ResultFailed, Source: ev.Source,
			Error: "undecodable task payload: " + err.Error()}
		return out
	}
	if len(task.Input) == 0 {
		task.Input = json.RawMessage("null")
	}
	out.result = Result{TaskID: task.TaskID, Source: ev.Source}
	if sessionTask(out, &task) {
		out.messages = append([]Message{{Role: "user", Content: clip(inputText(task.Input)), TaskID: task.TaskID}}, out.messages...)
		return out
	}
	log := &TurnLog{EventID: ev.ID, TaskID: task.TaskID}
	if in.turn != nil && in.turn.EventID == ev.ID {
		log = in.turn
	}
	// The history of the task is written from the log at the end, so that
	// a task resumed after a crash records its earlier steps too.
	end := func(final Message) *outcome {
		out.messages = append(out.messages, Message{Role: "user", Content: clip(inputText(task.Input)), TaskID: task.TaskID})
		for _, st := range log.Steps {
			for _, res := range st.Results {
				out.messages = append(out.messages, Message{Role: "tool", Name: res.Tool, Content: clip(toolText(res)), TaskID: task.TaskID})
			}
		}
		final.TaskID = task.TaskID
		out.messages = append(out.messages, final)
		out.usage = log.Usage
		return out
	}
	fail := func(msg string) *outcome {
		out.result.Status = ResultFailed
		out.result.Error = msg
		return end(Message{Role: "assistant", Content: clip("error: " + msg)})
	}
	var deadline time.Time
	if task.Deadline != "" {
		if d, err := time.Parse(time.RFC3339, task.Deadline); err == nil {
			deadline = d
			if r.cfg.Now().After(d) {
				return fail("deadline " + task.Deadline + " passed before the task started")
			}
		}
	}

	ctx := context.Background()
	var results []ToolResult
	for _, st := range log.Steps {
		results = append(results, st.Results...)
	}
	// A call whose outcome a crash left unknown, put before an operator:
	// the task goes on only with the decision.
	if log.Awaiting != nil && len(log.Steps) > 0 {
		if in.inline {
			return nil
		}
		status, msg, aborted := r.decide(ev, &task, log, deadline)
		switch {
		case aborted:
			out.aborted = true
			return out
		case status == ResultFailed:
			return fail(msg)
		case status != "":
			out.result.Status = status
			out.result.Error = msg
			return end(Message{Role: "assistant", Content: clip("unknown outcome: " + msg)})
		}
		results = results[:0]
		for _, st := range log.Steps {
			results = append(results, st.Results...)
		}
	}
	// A reply saved by an earlier process whose calls did not all run:
	// run the rest without asking the brain again.
	if n := len(log.Steps); n > 0 && len(log.Steps[n-1].Results) < len(log.Steps[n-1].Calls) {
		if in.inline {
			return nil
		}
		if r.runCalls(ctx, ev, &task, log, &results) {
			out.aborted = true
			return out
		}
	}
	// Session continuity's request for a summary runs no tool: the model
	// is offered none, and a reply that calls one is no summary.
	summary := task.Type == TaskTypeSessionSummary && IsPlanTaskID(task.TaskID)
	turn := Turn{AgentID: r.cfg.AgentID, SystemPrompt: r.cfg.SystemPrompt, History: in.history,
		Memory: in.memory, Resume: in.resume, Task: task, Tools: r.toolSpecs()}
	if summary {
		turn.Tools = nil
	}
	for step := len(log.Steps); step < r.cfg.MaxSteps; step++ {
		turn.Step = step
		turn.Results = results
		turn.Steps = log.Steps
		if !in.inline {
			r.progress(task.TaskID, step, "thinking")
		}
		turn.OnTokens = r.tokenProgress(task.TaskID, step)
		reply, aborted, err := r.ask(ctx, task.TaskID, deadline, turn, in.inline)
		if aborted {
			out.aborted = true
			return out
		}
		if in.inline {
			if errors.Is(err, ErrBrainUnavailable) || err == nil && len(reply.Calls) > 0 {
				return nil // nothing changed or reported: the goroutine starts over
			}
			r.progress(task.TaskID, step, "thinking") // what the goroutine reports before asking
		}
		if err != nil {
			return fail("brain: " + err.Error())
		}
		log.Usage = log.Usage.Add(reply.Usage)
		if summary && len(reply.Calls) > 0 {
			return fail("a session_summary task runs no tools; the brain called " + reply.Calls[0].Tool)
		}
		if len(reply.Calls) == 0 {
			out.result.Status = ResultDone
			out.result.Output = reply.Output
			if len(out.result.Output) == 0 {
				out.result.Output = json.RawMessage("null")
			}
			r.progress(task.TaskID, 100, "done")
			return end(Message{Role: "assistant", Content: clip(inputText(out.result.Output))})
		}
		// The reply is durable before any of its calls runs: a crash from
		// here on resumes with these calls, not with a new question. A
		// quick brain is asked again instead: it answers the same, at
		// once. (A non-idempotent call saves the reply with its intent.)
		log.Steps = append(log.Steps, TurnStep{Calls: reply.Calls})
		if !r.quick && r.checkpoint(ev, log, nil) != nil {
			out.aborted = true
			return out
		}
		if r.runCalls(ctx, ev, &task, log, &results) {
			out.aborted = true
			return out
		}
	}
	return fail(fmt.Sprintf("no answer after %d steps (limits.max_steps)", r.cfg.MaxSteps))
}

// runCalls runs the calls of the log's last step that have no result yet,
// appending each result to the step and to results. It returns true when
// the runtime refused to let a tool start (stopping).
func (r *Runtime) runCalls(ctx context.Context, ev Event, task *Task, log *TurnLog, results *[]ToolResult) (aborted bool) {
	taskID := task.TaskID
	st := &log.Steps[len(log.Steps)-1]
	for i := len(st.Results); i < len(st.Calls); i++ {
		call := st.Calls[i]
		r.progress(taskID, len(log.Steps)-1, "tool:"+call.Tool)
		res, aborted := r.runTool(ctx, ev, task, len(*results), call, *results, log)
		if aborted {
			return true
		}
		st.Results = append(st.Results, res)
		*results = append(*results, res)
	}
	return false
}

// checkpoint saves the task's progress (and, for a non-idempotent tool
// about to run, its pending action) and returns once it is durable. An
// error means the runtime is stopping: the tool must not start.
func (r *Runtime) checkpoint(ev Event, log *TurnLog, action *PendingAction) error {
	in := &intent{turn: log.Clone(), reply: make(chan error, 1)}
	if action != nil {
		in.action = *action
		in.hasAction = true
	}
	r.intentCh <- in
	return <-in.reply
}

// ask asks the brain, and while the model server cannot be reached keeps
// the task waiting and asks again with backoff, until the runtime stops
// (aborted) or the task's deadline passes. once: it asks once and returns
// the brain's error, whatever it is (an inline tick never waits).
func (r *Runtime) ask(ctx context.Context, taskID string, deadline time.Time, turn Turn, once bool) (Reply, bool, error) {
	wait := r.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		reply, err := r.cfg.Brain.Think(ctx, turn)
		if once || err == nil || !errors.Is(err, ErrBrainUnavailable) {
			return reply, false, err
		}
		if !deadline.IsZero() && r.cfg.Now().Add(wait).After(deadline) {
			return Reply{}, false, fmt.Errorf("%w; the task's deadline passes before the next attempt", err)
		}
		r.log.Warn().Err(err).Str("task", taskID).Int("attempt", attempt).Dur("retry_in", wait).
			Msg("model server unreachable: the task waits and asks again")
		r.progress(taskID, turn.Step, "waiting for model")
		t := time.NewTimer(jitter(wait))
		select {
		case <-t.C:
		case <-r.stopCh:
			t.Stop()
			return Reply{}, true, nil
		}
		wait = min(wait*2, r.cfg.RetryMax)
	}
}

// jitter returns d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}

// runTool runs one call. A non-idempotent tool runs only after its intent is
// durable; aborted is true when the runtime refused the intent (stopping).
func (r *Runtime) runTool(ctx context.Context, ev Event, task *Task, step int, call Call, done []ToolResult, log *TurnLog) (ToolResult, bool) {
	taskID := task.TaskID
	res := ToolResult{Tool: call.Tool, CallID: call.ID}
	t, ok := r.tools[call.Tool]
	if !ok {
		res.Error = fmt.Sprintf("tool %q is not available to this agent", call.Tool)
		return res, false
	}
	if err := argsObject(call.Args); err != nil {
		res.Error = err.Error()
		return res, false
	}
	if err := t.CheckArgs(call.Args); err != nil {
		res.Error = err.Error()
		return res, false
	}
	if !t.Idempotent {
		action := &PendingAction{EventID: ev.ID, TaskID: taskID, Step: step, Tool: call.Tool,
			Args: call.Args, Completed: append([]ToolResult(nil), done...), StartedAt: r.nowMs()}
		if err := r.checkpoint(ev, log, action); err != nil {
			return res, true
		}
	}
	tctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	env := tool.Env{AgentID: r.cfg.AgentID, TaskID: taskID, ArtifactsDir: r.artifactsFor(task),
		ProjectID: task.ProjectID, SessionID: task.SessionID,
		Log: r.log.With().Str("tool", call.Tool).Str("task", taskID).Logger(), Services: r.cfg.Services}
	if env.ArtifactsDir == r.cfg.ArtifactsDir {
		env.Artifacts = r.artifacts // the agent's own directory, opened once
	}
	output, err := t.Run(tctx, env, call.Args)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s", r.cfg.ToolTimeout)
		}
		res.Error = err.Error()
		return res, false
	}
	res.Output = output
	return res, false
}

// argsObject checks that a call's arguments are a JSON object (or absent):
// a model may send anything, and the error goes back to it as the result.
func argsObject(raw json.RawMessage) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return fmt.Errorf("bad arguments: want a JSON object, got %s", clipN(string(trimmed), 200))
	}
	return nil
}

// toolSpecs describes the agent's tools to its brain, in the order the
// host gave them.
func (r *Runtime) toolSpecs() []ToolSpec {
	specs := make([]ToolSpec, 0, len(r.cfg.Tools))
	for _, t := range r.cfg.Tools {
		specs = append(specs, ToolSpec{Name: t.Name, Description: t.Description, Idempotent: t.Idempotent, Parameters: t.Parameters})
	}
	return specs
}

func (r *Runtime) progress(taskID string, step int, phase string) {
	pct := step * 100 / (r.cfg.MaxSteps + 1)
	if phase == "done" {
		pct = 100
	}
	r.cur.step(taskID, step, pct, phase, -1, r.cfg.Now())
	if r.cfg.OnProgress == nil {
		return
	}
	r.cfg.OnProgress(taskID, pct, phase)
}

// inputText renders a JSON value as history text: a JSON string as its text,
// anything else as compact JSON.
func inputText(raw json.RawMessage) string {
	if s, ok := plainString(raw); ok {
		return s
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// plainString returns the text of a JSON string made of printable ASCII
// without escapes, which is the bytes between its quotes, and false for any
// other JSON. json.Unmarshal reads a string twice (it validates the whole
// input, then decodes): 20 µs of a 1 KiB task's processor time over MQTT,
// where this scan takes about one.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(body), true
}

func toolText(res ToolResult) string {
	if res.Error != "" {
		return "error: " + res.Error
	}
	return string(res.Output)
}

func clip(s string) string { return clipN(s, maxMessageBytes) }

func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d bytes cut]", s[:cut], len(s)-cut)
}

// maxModelSummary bounds the summary a brain writes into working memory.
const maxModelSummary = 4096

// summarizeOverflow asks a brain that can summarise to fold the messages this
// outcome pushes out of the context window into the running summary. When the
// brain fails (its model unreachable), the outcome carries a note instead and
// the kernel's clipped lines stand in for the summary.
func (r *Runtime) summarizeOverflow(in tickInput, out *outcome) {
	sum, ok := r.cfg.Brain.(Summarizer)
	if !ok {
		return
	}
	n := len(in.history) + len(out.messages)
	at := func(i int) Message {
		if i < len(in.history) {
			return in.history[i]
		}
		return out.messages[i-len(in.history)]
	}
	bytes := in.histBytes
	for _, m := range out.messages {
		bytes += len(m.Content)
	}
	drop := 0
	for r.lim.overBudget(n-drop, bytes) {
		bytes -= len(at(drop).Content)
		drop++
	}
	if drop == 0 {
		return
	}
	dropped := make([]Message, drop)
	for i := range dropped {
		dropped[i] = at(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.SummaryTimeout)
	defer cancel()
	text, err := sum.Summarize(ctx, in.memory, dropped)
	if err != nil {
		r.log.Warn().Err(err).Int("messages", drop).Msg("no model summary of the messages leaving the context window; they are truncated with a note")
		out.summary = &modelSummary{covers: drop, note: fmt.Sprintf("%d messages left the window without a model summary (%v); the summary holds their first words",
			drop, clipN(err.Error(), 200))}
		return
	}
	out.summary = &modelSummary{text: clipN(text, maxModelSummary), covers: drop}
}

// tokenProgress returns the Turn.OnTokens of one step: the count goes to
// Current, and to OnProgress when somebody listens.
func (r *Runtime) tokenProgress(taskID string, step int) func(int) {
	pct := step * 100 / (r.cfg.MaxSteps + 1)
	return func(n int) {
		r.cur.step(taskID, step, pct, "thinking", n, r.cfg.Now())
		if r.cfg.OnProgress != nil {
			r.cfg.OnProgress(taskID, pct, fmt.Sprintf("thinking: %d tokens", n))
		}
	}
}
