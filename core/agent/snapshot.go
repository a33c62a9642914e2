package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// SchemaVersion is the version of the snapshot JSON this build writes.
// Version 0 (the field absent) is the bare contract of the specification;
// every later version only adds optional fields, so any older snapshot
// decodes into the current struct unchanged.
const SchemaVersion = 1

// Snapshot is the AgentSnapshot: the whole state of one agent and the only
// contract between the kernel and a storage backend. Its JSON is the
// specification's, field for field; fields after EventQueueBackup are the
// optional additions of this implementation and are omitted when empty.
type Snapshot struct {
	AgentID          string  `json:"agent_id"`
	TickIndex        uint64  `json:"tick_index"`
	Timestamp        int64   `json:"timestamp"` // Unix milliseconds of the last change
	Status           Status  `json:"status"`
	Memory           Memory  `json:"memory"`
	EventQueueBackup []Event `json:"event_queue_backup"`

	SchemaVersion int            `json:"schema_version,omitempty"`
	SessionID     string         `json:"session_id,omitempty"`
	Outbox        []Result       `json:"outbox,omitempty"`
	PendingAction *PendingAction `json:"pending_action,omitempty"`
	// Turn is the saved progress of the task at the head of the queue:
	// every brain reply so far and the results of the calls that ran.
	// It is saved before any tool of a reply runs, so that after a crash
	// the brain is not asked the same question again.
	Turn           *TurnLog `json:"turn,omitempty"`
	RecentEventIDs []string `json:"recent_event_ids,omitempty"`
	// NextResultSeq is the sequence number the next Result will carry;
	// results are numbered from 1.
	NextResultSeq uint64 `json:"next_result_seq,omitempty"`

	// HistorySeq is the absolute position of Memory.ShortTermHistory[0]
	// in the agent's whole conversation, and QueueSeq the absolute
	// position of EventQueueBackup[0] among all events ever queued. The
	// kernel only appends to both lists and drops from their fronts, and
	// never changes an element once appended, so a backend may write just
	// the elements past what it stored last. They are not part of the
	// contract JSON: a backend that does not use them ignores them, and a
	// snapshot loaded from JSON starts them at zero.
	HistorySeq uint64 `json:"-"`
	QueueSeq   uint64 `json:"-"`
	// RecentSeq is the absolute position of RecentEventIDs[0] among all
	// ids ever remembered, under the same promise.
	RecentSeq uint64 `json:"-"`
}

// OutboxSeq returns the position of Outbox[0] among all results, for a
// backend that writes only what changed: the Seq of the first result, or
// NextResultSeq when the outbox is empty. ok is false when the results are
// not numbered one after the other (one confirmed out of order left a
// hole); the outbox must then be written in full.
func (s *Snapshot) OutboxSeq() (seq uint64, ok bool) {
	out := s.Outbox
	if len(out) == 0 {
		return s.NextResultSeq, true
	}
	for i := 1; i < len(out); i++ {
		if out[i].Seq != out[i-1].Seq+1 {
			return 0, false
		}
	}
	return out[0].Seq, true
}

// Memory is the agent's short-term memory: the bounded dialogue window and
// the variables it holds.
type Memory struct {
	ShortTermHistory []Message      `json:"short_term_history"`
	WorkingVariables map[string]any `json:"working_variables"`
}

// Message is one entry of the dialogue window.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// TaskID names the task the message belongs to, when it belongs to one.
	TaskID string `json:"task_id,omitempty"`
	// Name is the tool name for role "tool" messages.
	Name string `json:"name,omitempty"`
}

// Event is one unprocessed input of the agent. Source, Type and Payload are
// the specification's; ID identifies the event for duplicate detection (for a
// task it is the task_id).
type Event struct {
	Source     string          `json:"source"`
	Type       string          `json:"type"`
	Payload    json.RawMessage `json:"payload"`
	ID         string          `json:"id,omitempty"`
	ReceivedAt int64           `json:"received_at,omitempty"` // Unix ms

	// task is what Payload decodes to, when TaskEvent made the event from
	// a task DecodeTask read: the tick takes it instead of decoding the
	// payload a second time. It is never stored: an event loaded from a
	// snapshot has none and is decoded.
	task *Task
}

// Result statuses of a finished task.
const (
	ResultDone           = "done"
	ResultFailed         = "failed"
	ResultUnknownOutcome = "unknown_outcome"
)

// Result is the answer to one task: what the outbox holds until it is
// delivered and what the task index keeps for the retention window.
type Result struct {
	Seq        uint64          `json:"seq"`
	TaskID     string          `json:"task_id"`
	AgentID    string          `json:"agent_id"`
	Status     string          `json:"status"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	TickIndex  uint64          `json:"tick_index"`
	Source     string          `json:"source,omitempty"`
	FinishedAt int64           `json:"finished_at,omitempty"` // Unix ms
}

// PendingAction is the intent recorded, and saved, before a non-idempotent
// tool runs. Finding one when the agent hydrates means the process died
// between the intent and the tick's final save: the tool may or may not have
// run, so the task ends as unknown_outcome instead of running it again.
type PendingAction struct {
	EventID   string          `json:"event_id"`
	TaskID    string          `json:"task_id,omitempty"`
	Step      int             `json:"step"` // index of the call within the task
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args,omitempty"`
	Completed []ToolResult    `json:"completed,omitempty"` // calls that finished before it
	StartedAt int64           `json:"started_at"`          // Unix ms
}

// TurnLog is the progress of one task between the brain's first reply and
// the task's end.
type TurnLog struct {
	EventID string     `json:"event_id"`
	TaskID  string     `json:"task_id,omitempty"`
	Steps   []TurnStep `json:"steps"`
	Usage   Usage      `json:"usage,omitempty"` // tokens spent on this task so far
	// Awaiting, when set, is the call of the last step whose outcome a
	// crash left unknown and that waits for an operator's decision
	// (unknown_outcome "approval"); the task goes on only once it is
	// decided.
	Awaiting *AwaitingDecision `json:"awaiting_decision,omitempty"`
}

// AwaitingDecision is an interrupted non-idempotent call put before an
// operator: its tool and arguments, and the approval raised for it once
// session continuity has recorded one (0 until then).
type AwaitingDecision struct {
	CallID     string          `json:"call_id,omitempty"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args,omitempty"`
	ApprovalID int64           `json:"approval_id,omitempty"`
}

// TurnStep is one brain reply that called tools, and the results of those
// calls in order; a result is missing for each call that has not run yet.
type TurnStep struct {
	Calls   []Call       `json:"calls"`
	Results []ToolResult `json:"results,omitempty"`
}

// Clone returns a copy of l that shares no slice with it.
func (l *TurnLog) Clone() *TurnLog {
	if l == nil {
		return nil
	}
	c := *l
	c.Steps = make([]TurnStep, len(l.Steps))
	for i, st := range l.Steps {
		c.Steps[i] = TurnStep{Calls: append([]Call(nil), st.Calls...), Results: append([]ToolResult(nil), st.Results...)}
	}
	if l.Awaiting != nil {
		a := *l.Awaiting
		c.Awaiting = &a
	}
	return &c
}

// ToolResult is the outcome of one tool call.
type ToolResult struct {
	// CallID is the brain's id of the call (Call.ID), when it gave one.
	CallID string          `json:"call_id,omitempty"`
	Tool   string          `json:"tool"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ErrInvalidSnapshot is returned by Decode and Validate for a snapshot that
// is not valid contract JSON.
var ErrInvalidSnapshot = errors.New("invalid snapshot")

// Encode returns the contract JSON of s. It is json.Marshal(s), byte for
// byte, without json.Marshal's second pass over what MarshalJSON returns
// (a scan that checks and compacts it, and a copy): MarshalJSON's output
// comes from json.Marshal already. Every Save encodes the snapshot's body.
func Encode(s *Snapshot) ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	return s.MarshalJSON()
}

// MarshalJSON writes the contract JSON: the specification's lists and maps
// are always present, as [] and {} when empty, never null.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	type plain Snapshot // no methods: no recursion
	p := plain(s)
	if p.Memory.ShortTermHistory == nil {
		p.Memory.ShortTermHistory = []Message{}
	}
	if p.Memory.WorkingVariables == nil {
		p.Memory.WorkingVariables = map[string]any{}
	}
	if p.EventQueueBackup == nil {
		p.EventQueueBackup = []Event{}
	}
	return json.Marshal(p)
}

// Decode parses contract JSON, written by this or any older version, and
// validates it. Unknown fields are rejected so that a mistyped hand edit
// is reported rather than silently dropped.
func Decode(data []byte) (*Snapshot, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Snapshot
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the snapshot", ErrInvalidSnapshot)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the invariants every stored snapshot holds.
func (s *Snapshot) Validate() error {
	if err := ValidateID(s.AgentID); err != nil {
		return fmt.Errorf("%w: agent_id: %v", ErrInvalidSnapshot, err)
	}
	if !s.Status.Valid() {
		return fmt.Errorf("%w: unknown status %q", ErrInvalidSnapshot, s.Status)
	}
	if s.SchemaVersion > SchemaVersion {
		return fmt.Errorf("%w: schema_version %d is newer than this build understands (%d)",
			ErrInvalidSnapshot, s.SchemaVersion, SchemaVersion)
	}
	if s.PendingAction != nil && s.PendingAction.Tool == "" {
		return fmt.Errorf("%w: pending_action without a tool", ErrInvalidSnapshot)
	}
	if s.Turn != nil && s.Turn.EventID == "" {
		return fmt.Errorf("%w: turn without an event_id", ErrInvalidSnapshot)
	}
	return nil
}

// New returns the blank snapshot of a fresh agent.
func New(agentID string, nowMs int64) *Snapshot {
	return &Snapshot{
		AgentID:       agentID,
		Timestamp:     nowMs,
		Status:        StatusStarting,
		SchemaVersion: SchemaVersion,
		Memory: Memory{
			ShortTermHistory: []Message{},
			WorkingVariables: map[string]any{},
		},
		EventQueueBackup: []Event{},
	}
}

// Clone returns a deep copy of s. Elements of the history and the queue are
// immutable once appended, so they are shared; everything else is copied.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.Memory.ShortTermHistory = append(make([]Message, 0, len(s.Memory.ShortTermHistory)), s.Memory.ShortTermHistory...)
	c.Memory.WorkingVariables = cloneVars(s.Memory.WorkingVariables)
	c.EventQueueBackup = append(make([]Event, 0, len(s.EventQueueBackup)), s.EventQueueBackup...)
	c.Outbox = append([]Result(nil), s.Outbox...)
	c.RecentEventIDs = append([]string(nil), s.RecentEventIDs...)
	if s.PendingAction != nil {
		p := *s.PendingAction
		p.Completed = append([]ToolResult(nil), s.PendingAction.Completed...)
		c.PendingAction = &p
	}
	c.Turn = s.Turn.Clone()
	return &c
}

func cloneVars(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneVars(t)
	case []any:
		out := make([]any, len(t))
		for i := range t {
			out[i] = cloneValue(t[i])
		}
		return out
	default:
		return v
	}
}
