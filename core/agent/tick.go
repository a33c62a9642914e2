package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/tool"
)

// maxMessageBytes bounds one history message; longer content is cut.
const maxMessageBytes = 16 << 10

// tick runs one event through the brain and the tools, off the runtime's
// goroutine, and hands the outcome back. It never touches r.snap.
func (r *Runtime) tick(ev Event, history []Message) {
	out := r.think(ev, history)
	r.doneCh <- out
}

func (r *Runtime) think(ev Event, history []Message) *outcome {
	out := &outcome{ev: ev}
	if ev.Type != "task" {
		out.result = Result{TaskID: ev.ID, Status: ResultFailed, Source: ev.Source,
			Error: fmt.Sprintf("unsupported event type %q", ev.Type)}
		return out
	}
	var task Task
	if err := json.Unmarshal(ev.Payload, &task); err != nil {
		out.result = Result{TaskID: ev.ID, Status: ResultFailed, Source: ev.Source,
			Error: "undecodable task payload: " + err.Error()}
		return out
	}
	if len(task.Input) == 0 {
		task.Input = json.RawMessage("null")
	}
	out.result = Result{TaskID: task.TaskID, Source: ev.Source}
	out.messages = append(out.messages, Message{Role: "user", Content: clip(inputText(task.Input)), TaskID: task.TaskID})
	if sessionTask(out, &task) {
		return out
	}
	fail := func(msg string) *outcome {
		out.result.Status = ResultFailed
		out.result.Error = msg
		out.messages = append(out.messages, Message{Role: "assistant", Content: clip("error: " + msg), TaskID: task.TaskID})
		return out
	}
	if task.Deadline != "" {
		if d, err := time.Parse(time.RFC3339, task.Deadline); err == nil && r.cfg.Now().After(d) {
			return fail("deadline " + task.Deadline + " passed before the task started")
		}
	}

	ctx := context.Background()
	specs := r.toolSpecs()
	turn := Turn{AgentID: r.cfg.AgentID, SystemPrompt: r.cfg.SystemPrompt, History: history, Task: task, Tools: specs}
	var results []ToolResult
	for step := 0; step < r.cfg.MaxSteps; step++ {
		turn.Step = step
		turn.Results = results
		r.progress(task.TaskID, step, "thinking")
		reply, err := r.cfg.Brain.Think(ctx, turn)
		if err != nil {
			return fail("brain: " + err.Error())
		}
		if len(reply.Calls) == 0 {
			out.result.Status = ResultDone
			out.result.Output = reply.Output
			if len(out.result.Output) == 0 {
				out.result.Output = json.RawMessage("null")
			}
			out.messages = append(out.messages, Message{Role: "assistant", Content: clip(inputText(out.result.Output)), TaskID: task.TaskID})
			r.progress(task.TaskID, 100, "done")
			return out
		}
		for _, call := range reply.Calls {
			r.progress(task.TaskID, step, "tool:"+call.Tool)
			res, aborted := r.runTool(ctx, ev, &task, len(results), call, results)
			if aborted {
				out.aborted = true
				return out
			}
			results = append(results, res)
			out.messages = append(out.messages, Message{Role: "tool", Name: call.Tool, Content: clip(toolText(res)), TaskID: task.TaskID})
		}
	}
	return fail(fmt.Sprintf("no answer after %d steps (limits.max_steps)", r.cfg.MaxSteps))
}

// runTool runs one call. A non-idempotent tool runs only after its intent is
// durable; aborted is true when the runtime refused the intent (stopping).
func (r *Runtime) runTool(ctx context.Context, ev Event, task *Task, step int, call Call, done []ToolResult) (ToolResult, bool) {
	taskID := task.TaskID
	res := ToolResult{Tool: call.Tool}
	if !r.allowed(call.Tool) {
		res.Error = fmt.Sprintf("tool %q is not available to this agent", call.Tool)
		return res, false
	}
	t, err := tool.Lookup(call.Tool)
	if err != nil {
		res.Error = err.Error()
		return res, false
	}
	if !t.Idempotent {
		in := &intent{
			action: PendingAction{EventID: ev.ID, TaskID: taskID, Step: step, Tool: call.Tool,
				Args: call.Args, Completed: append([]ToolResult(nil), done...), StartedAt: r.nowMs()},
			reply: make(chan error, 1),
		}
		r.intentCh <- in
		if err := <-in.reply; err != nil {
			return res, true
		}
	}
	tctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	env := tool.Env{AgentID: r.cfg.AgentID, TaskID: taskID, ArtifactsDir: r.artifactsFor(task),
		ProjectID: task.ProjectID, SessionID: task.SessionID,
		Log: r.log.With().Str("tool", call.Tool).Str("task", taskID).Logger(), Services: r.cfg.Services}
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

func (r *Runtime) allowed(name string) bool {
	for _, n := range r.cfg.Tools {
		if n == name {
			return true
		}
	}
	return false
}

func (r *Runtime) toolSpecs() []ToolSpec {
	specs := make([]ToolSpec, 0, len(r.cfg.Tools))
	for _, n := range r.cfg.Tools {
		if t, err := tool.Lookup(n); err == nil {
			specs = append(specs, ToolSpec{Name: t.Name, Description: t.Description, Idempotent: t.Idempotent})
		}
	}
	return specs
}

func (r *Runtime) progress(taskID string, step int, phase string) {
	if r.cfg.OnProgress == nil {
		return
	}
	pct := step * 100 / (r.cfg.MaxSteps + 1)
	if phase == "done" {
		pct = 100
	}
	r.cfg.OnProgress(taskID, pct, phase)
}

// inputText renders a JSON value as history text: a JSON string as its text,
// anything else as compact JSON.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func toolText(res ToolResult) string {
	if res.Error != "" {
		return "error: " + res.Error
	}
	return string(res.Output)
}

func clip(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d bytes cut]", s[:cut], len(s)-cut)
}
