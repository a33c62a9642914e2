package agent

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sync"

	"github.com/openstarry/openstarry-edge/core/jsonclip"
)

// TaskTypeSessionResume is the type of the task by which versions before
// the plan: namespace handed a resumed session's context to the master:
// the kernel keeps its input in working_variables as resume_context and
// answers done without asking the brain. Session continuity now sends the
// context with each task of the session instead (Task.ResumeContext).
const TaskTypeSessionResume = "session_resume"

// Session ids as session continuity makes them; a task naming others is
// run without session context (its artifacts stay in the agent's directory).
var (
	projectIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^proj_[0-9]{8}_[a-z0-9]{6}$`) })
	sessionIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sess_[0-9]{14}_[a-z0-9]{6}$`) })
)

// inSession reports whether a task belongs to a project's session.
func inSession(t *Task) bool {
	return projectIDRe().MatchString(t.ProjectID) && sessionIDRe().MatchString(t.SessionID)
}

// artifactsFor is the directory a task's file tools write to: its
// session's (Config.TaskArtifacts) or the agent's own.
func (r *Runtime) artifactsFor(t *Task) string {
	if r.cfg.TaskArtifacts != nil && inSession(t) {
		if dir := r.cfg.TaskArtifacts(t.ProjectID, t.SessionID); dir != "" {
			return dir
		}
	}
	return r.cfg.ArtifactsDir
}

// sessionTask notes a task's session in its outcome, and answers a
// session_resume task itself; it returns true when the task is answered.
func sessionTask(out *outcome, t *Task) bool {
	if !inSession(t) {
		return false
	}
	out.projectID, out.sessionID = t.ProjectID, t.SessionID
	if t.Type != TaskTypeSessionResume {
		return false
	}
	var ctx any
	if err := json.Unmarshal(t.Input, &ctx); err != nil {
		ctx = string(t.Input)
	}
	out.vars = map[string]any{"resume_context": ctx, "resume_session_id": t.SessionID}
	out.result.Status = ResultDone
	out.result.Output = json.RawMessage(`{"stored":"working_variables.resume_context"}`)
	out.messages = append(out.messages, Message{Role: "assistant", Content: "resume context stored", TaskID: t.TaskID})
	return true
}

// applySession records a finished task's session in the snapshot: its
// session_id, and project_id / session_id (and what the task set) in
// working variables. The caller is the runtime's goroutine.
func applySession(s *Snapshot, out *outcome) {
	if out.sessionID == "" {
		return
	}
	s.SessionID = out.sessionID
	vars := s.Memory.WorkingVariables
	vars["project_id"], vars["session_id"] = out.projectID, out.sessionID
	for k, v := range out.vars {
		vars[k] = v
	}
}

// TaskTypeSessionSummary is the type of the task by which session
// continuity asks an agent for a session's context_summary, its input the
// counting line it falls back on. A model is told what to write (a system
// message, Turn.Resume's place); the echo brain answers the input, so the
// counting line is its summary.
const TaskTypeSessionSummary = "session_summary"

// summaryInstruction is what a model is told with a session_summary task.
const summaryInstruction = "Session continuity asks for this session's context summary: in at most three sentences, " +
	"say what has been done, what is in progress and what is blocked or failed, for whoever resumes the work. " +
	"Answer with the summary only. The facts, as the plan counts them, are the task's input."

// maxResume bounds the resume context a brain is given (Turn.Resume).
const maxResume = 8 << 10

// resumeHeader introduces the resume context to a model.
const resumeHeader = "This task belongs to a session that resumes an interrupted one (session continuity). " +
	"The resume context below says why it stopped, where it stood, the task in progress, the approaches verified, " +
	"failed (do not repeat them) and next to try, the remaining tasks and the operators' decisions:\n"

// resumeFor is the Turn.Resume of a task, from the task's own payload: the
// resume context session continuity sent with it, as compact JSON after a
// header, cut to maxResume in all so that what the model reads is still
// valid JSON (jsonclip); "" for a task with none, or outside the plan:
// namespace (only the daemon's dispatcher sends those).
func resumeFor(taskID string, payload json.RawMessage) string {
	if IsPlanTaskID(taskID) && bytes.Contains(payload, []byte(`"`+TaskTypeSessionSummary+`"`)) {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(payload, &t) == nil && t.Type == TaskTypeSessionSummary {
			return summaryInstruction
		}
	}
	if !IsPlanTaskID(taskID) || !bytes.Contains(payload, []byte(`"resume_context"`)) {
		return ""
	}
	var t struct {
		ResumeContext json.RawMessage `json:"resume_context"`
	}
	if json.Unmarshal(payload, &t) != nil || len(t.ResumeContext) == 0 || string(t.ResumeContext) == "null" {
		return ""
	}
	rc, _ := jsonclip.Clip(t.ResumeContext, maxResume-len(resumeHeader))
	return resumeHeader + string(rc)
}
