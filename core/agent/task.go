package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Task is the task JSON of the transports (MQTT payload, HTTP body).
type Task struct {
	TaskID    string          `json:"task_id"`
	Type      string          `json:"type,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ProjectID string          `json:"project_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	Deadline  string          `json:"deadline,omitempty"` // RFC 3339
}

// Codes of TaskError, stable strings that HTTP answers and dead letters carry.
const (
	CodeBadJSON       = "bad_json"
	CodeMissingTaskID = "missing_task_id"
	CodeBadTaskID     = "bad_task_id"
	CodeTooLarge      = "too_large"
	CodeBadDeadline   = "bad_deadline"
)

// TaskError says why a task was rejected before it was queued.
type TaskError struct {
	Code string
	Msg  string
}

func (e *TaskError) Error() string { return e.Msg }

// DecodeTask parses and checks one task. maxBytes bounds the payload
// (0 means no bound). Unknown fields are ignored, so a hub may add its own.
func DecodeTask(data []byte, maxBytes int) (*Task, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, &TaskError{CodeTooLarge, fmt.Sprintf("task is %d bytes, the limit is %d", len(data), maxBytes)}
	}
	var t Task
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&t); err != nil {
		return nil, &TaskError{CodeBadJSON, "task is not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &TaskError{CodeBadJSON, "task is not valid JSON: trailing data after the object"}
	}
	if t.TaskID == "" {
		return nil, &TaskError{CodeMissingTaskID, "task has no task_id"}
	}
	if err := ValidateID(t.TaskID); err != nil {
		return nil, &TaskError{CodeBadTaskID, "task_id: " + err.Error()}
	}
	if t.Deadline != "" {
		if _, err := time.Parse(time.RFC3339, t.Deadline); err != nil {
			return nil, &TaskError{CodeBadDeadline, "deadline is not RFC 3339: " + err.Error()}
		}
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("null")
	}
	return &t, nil
}

// TaskEvent wraps a decoded task as a queue event from source.
func TaskEvent(t *Task, source string, nowMs int64) (Event, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return Event{}, err
	}
	return Event{Source: source, Type: "task", Payload: payload, ID: t.TaskID, ReceivedAt: nowMs}, nil
}
