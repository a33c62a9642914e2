package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// Task is the task JSON of the transports (MQTT payload, HTTP body).
type Task struct {
	TaskID    string          `json:"task_id"`
	Type      string          `json:"type,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ProjectID string          `json:"project_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	Deadline  string          `json:"deadline,omitempty"` // RFC 3339
	// ResumeContext is the context of the resumed session a plan task
	// belongs to (session continuity sends it with each of the session's
	// tasks); ignored on a task outside the plan: namespace.
	ResumeContext json.RawMessage `json:"resume_context,omitempty"`

	raw []byte // the payload DecodeTask read
	// inputInRaw: Input is the bytes of raw that hold it (scanTask's),
	// not a copy.
	inputInRaw bool
}

// Codes of TaskError, stable strings that HTTP answers and dead letters carry.
const (
	CodeBadJSON       = "bad_json"
	CodeMissingTaskID = "missing_task_id"
	CodeBadTaskID     = "bad_task_id"
	CodeTooLarge      = "too_large"
	CodeBadDeadline   = "bad_deadline"
	CodeReservedID    = "reserved_task_id"
)

// PlanTaskPrefix opens the task ids session continuity gives plan tasks
// (plan:{project_id}:{session_id}:{task_id}:{attempt}). The namespace is the
// daemon's: DecodeTask refuses an id in it, so that a task sent straight to
// an agent (HTTP, MQTT, a webhook, a delegation) can never take the id of a
// plan task and be answered in its place; the daemon's own requests are
// decoded with DecodePlanTask.
const PlanTaskPrefix = "plan:"

// IsPlanTaskID reports whether id is in the plan task namespace.
func IsPlanTaskID(id string) bool { return strings.HasPrefix(id, PlanTaskPrefix) }

// TaskError says why a task was rejected before it was queued.
type TaskError struct {
	Code string
	Msg  string
}

func (e *TaskError) Error() string { return e.Msg }

// DecodeTask parses and checks one task. maxBytes bounds the payload
// (0 means no bound). An unknown field is refused (bad_json, naming it), so
// that a misspelt "inptu" is not run as a task without input; so is a key
// given twice in one object.
// The task keeps data (TaskEvent queues it as it came): the caller must not
// change data afterwards.
func DecodeTask(data []byte, maxBytes int) (*Task, error) {
	return decodeTask(data, maxBytes, false)
}

// DecodePlanTask is DecodeTask for the daemon's dispatcher, whose request
// the transport authenticated: the plan: namespace is allowed.
func DecodePlanTask(data []byte, maxBytes int) (*Task, error) {
	return decodeTask(data, maxBytes, true)
}

func decodeTask(data []byte, maxBytes int, plan bool) (*Task, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, &TaskError{CodeTooLarge, fmt.Sprintf("task is %d bytes, the limit is %d", len(data), maxBytes)}
	}
	// One pass for a task as clients send it; anything else, and every
	// malformed task, is decoded again by decodeTaskJSON, whose messages
	// say what is wrong.
	t, ok := scanTask(data)
	if !ok {
		var err error
		if t, err = decodeTaskJSON(data); err != nil {
			return nil, err
		}
	}
	if t.TaskID == "" {
		return nil, &TaskError{CodeMissingTaskID, "task has no task_id"}
	}
	if err := ValidateID(t.TaskID); err != nil {
		return nil, &TaskError{CodeBadTaskID, "task_id: " + err.Error()}
	}
	if !plan && IsPlanTaskID(t.TaskID) {
		return nil, &TaskError{CodeReservedID, fmt.Sprintf("task_id %q: ids beginning with %q are reserved for the plan tasks of session continuity", t.TaskID, PlanTaskPrefix)}
	}
	if t.Deadline != "" {
		if _, err := time.Parse(time.RFC3339, t.Deadline); err != nil {
			return nil, &TaskError{CodeBadDeadline, "deadline is not RFC 3339: " + err.Error()}
		}
	}
	aliased := ok && len(t.Input) > 0 // scanTask's input points into data
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("null")
	}
	// Queued as it came: encoding the task again would cost as much as
	// decoding it did.
	t.raw, t.inputInRaw = data, aliased
	return &t, nil
}

// decodeTaskJSON decodes a task with encoding/json and checks it: valid
// UTF-8, no unknown field, nothing after the object, no key twice in one
// object.
func decodeTaskJSON(data []byte) (Task, error) {
	if !utf8.Valid(data) {
		// JSON is UTF-8 (RFC 8259); decoding would replace what is not.
		return Task{}, &TaskError{CodeBadJSON, "task is not valid JSON: not UTF-8"}
	}
	var t Task
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Task{}, &TaskError{CodeBadJSON, taskFieldsHint(jsonerr.Describe("task", err), err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Task{}, &TaskError{CodeBadJSON, "task is not valid JSON: data after the task's object"}
	}
	// encoding/json keeps the last of two equal keys; a task whose id or
	// input depends on which one a reader takes is refused.
	if k, dup := duplicateKey(data); dup {
		return Task{}, &TaskError{CodeBadJSON, fmt.Sprintf("task is not valid JSON: key %q appears twice in one object", k)}
	}
	return t, nil
}

// TaskFields are the fields of a task, in the order the documentation gives
// them.
var TaskFields = []string{"task_id", "type", "input", "project_id", "session_id", "deadline"}

// taskFieldsHint adds the task's fields to the message of an unknown field.
func taskFieldsHint(msg string, err error) string {
	if _, ok := jsonerr.Unknown(err); ok {
		return msg + " (a task has " + strings.Join(TaskFields, ", ") + ")"
	}
	return msg
}

// TaskEvent wraps a decoded task as a queue event from source. The payload
// is the task as DecodeTask received it (unknown fields included), or the
// task encoded when it was built in Go.
func TaskEvent(t *Task, source string, nowMs int64) (Event, error) {
	payload := json.RawMessage(t.raw)
	if payload == nil {
		var err error
		if payload, err = json.Marshal(t); err != nil {
			return Event{}, err
		}
	}
	ev := Event{Source: source, Type: "task", Payload: payload, ID: t.TaskID, ReceivedAt: nowMs}
	if t.raw != nil {
		// The tick takes the decoded task (decoding the payload again
		// cost a 1 KiB task as much as DecodeTask did). Its input points
		// into the payload, which holds the same bytes, rather than keep
		// a second copy while the task is queued.
		dt := *t
		dt.raw, dt.inputInRaw = nil, false
		// scanTask's input is in the payload already: no search for it.
		if !t.inputInRaw && len(t.Input) > 0 {
			if i := bytes.Index(t.raw, t.Input); i >= 0 {
				dt.Input = json.RawMessage(t.raw[i : i+len(t.Input) : i+len(t.Input)])
			}
		}
		ev.task = &dt
	}
	return ev, nil
}
