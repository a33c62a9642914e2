package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/tool"
)

// Store is what the runtime needs of a storage plugin (plugin.Storage
// satisfies it).
type Store interface {
	Save(ctx context.Context, s *Snapshot) error
	Load(ctx context.Context, agentID string) (*Snapshot, error)
}

// ResultIndex is implemented by stores that keep finished results beside the
// snapshot (plugin.TaskIndex); TaskResult wraps a not-found error otherwise.
type ResultIndex interface {
	TaskResult(ctx context.Context, agentID, taskID string) (*Result, error)
}

// Outbox receives results once they are durable. Deliver is called on the
// runtime's goroutine after the Save that made them durable, with every result
// not yet handed over by this process, in order; it must not block. The sink
// calls Runtime.Confirm with each result's Seq once the result has reached its
// destination; confirmed results leave the snapshot's outbox at the next save.
type Outbox interface {
	Deliver(results []Result)
}

// Errors of Submit.
var (
	ErrQueueFull = errors.New("event queue is full")
	ErrStopping  = errors.New("agent is stopping")
	ErrStopped   = errors.New("agent has stopped")
)

// Task states reported by TaskState, beside the Result statuses.
const (
	TaskQueued  = "queued"
	TaskRunning = "running"
)

// TaskState is the current state of one task.
type TaskState struct {
	TaskID    string          `json:"task_id"`
	AgentID   string          `json:"agent_id"`
	Status    string          `json:"status"` // queued, running, done, failed, unknown_outcome
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	TickIndex uint64          `json:"tick_index,omitempty"`
}

// Config is everything a Runtime is built from. The host fills it from the
// frozen blueprint.
type Config struct {
	AgentID      string
	Store        Store
	Brain        Brain
	SystemPrompt string
	// Tools are the tools the brain may call, resolved by the host (from
	// the tool registry and the template's MCP servers); names are unique.
	// The runtime never consults the registry.
	Tools        []tool.Tool
	MaxMessages  int // short_term_history bound in messages; default 200
	MaxTokens    int // approximate token bound (4 bytes a token); 0 = none
	MaxSteps     int // brain steps per task; default 8
	MaxQueue     int // queued events before Submit fails with ErrQueueFull; default 10,000
	ToolTimeout  time.Duration
	ArtifactsDir string // opened once by Start as the agent's tool.Artifacts; "" for none
	// TaskArtifacts, when set, names the artifacts directory of a task
	// that belongs to a project's session (its project_id and session_id);
	// empty: ArtifactsDir.
	TaskArtifacts func(projectID, sessionID string) string
	// Vars are set into working_variables at every start (the template's
	// name, version and digest).
	Vars     map[string]any
	Services map[string]any // handed to tools
	Outbox   Outbox         // nil: results are confirmed as soon as they are durable
	// OnProgress, when set, is told of each step of a running task. It is
	// called from the tick's goroutine and must not block.
	OnProgress func(taskID string, percent int, phase string)
	Log        zerolog.Logger
	Now        func() time.Time

	// RecentIDs bounds recent_event_ids; default 1024.
	RecentIDs int

	// UnknownOutcome says what becomes of a task whose non-idempotent
	// tool was interrupted by a crash: UnknownEndTask (default) or
	// UnknownApproval end it as unknown_outcome; UnknownAskModel hands the
	// brain a tool result saying the outcome is unknown and lets it decide.
	UnknownOutcome string
	// RetryMin and RetryMax bound the wait between attempts while the
	// model server is unreachable; defaults 1s and 1m. The wait doubles
	// from RetryMin, with jitter.
	RetryMin, RetryMax time.Duration
	// SummaryTimeout bounds the brain's summary of the messages leaving
	// the context window; default 2m.
	SummaryTimeout time.Duration

	// Test hooks, called on the runtime's goroutine around every Save.
	BeforeSave func(s *Snapshot)
	AfterSave  func(s *Snapshot)
}

func (c *Config) setDefaults() {
	if c.MaxMessages <= 0 {
		c.MaxMessages = 200
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = 8
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 10000
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = 30 * time.Second
	}
	if c.RecentIDs <= 0 {
		c.RecentIDs = 1024
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SummaryTimeout <= 0 {
		c.SummaryTimeout = 2 * time.Minute
	}
	if c.UnknownOutcome == "" {
		c.UnknownOutcome = UnknownEndTask
	}
	if c.RetryMin <= 0 {
		c.RetryMin = time.Second
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(time.Minute, c.RetryMin)
	}
}

// What becomes of an interrupted non-idempotent tool (Config.UnknownOutcome).
const (
	UnknownEndTask  = "end_task"  // the task ends unknown_outcome
	UnknownAskModel = "ask_model" // the brain sees "outcome unknown" as the tool's result
	UnknownApproval = "approval"  // an operator decides; the task ends unknown_outcome
)

// Runtime runs one agent: one goroutine owns the snapshot and performs every
// change and every Save; the brain and the tools of a tick run on a second
// goroutine and hand their outcome back. Nothing outside that goroutine reads
// or writes the snapshot.
type Runtime struct {
	cfg   Config
	tools map[string]tool.Tool // cfg.Tools by name
	log   zerolog.Logger
	index ResultIndex // nil when the store keeps no results

	submitCh  chan *submission
	confirmCh chan uint64
	intentCh  chan *intent
	doneCh    chan *outcome
	snapCh    chan chan *Snapshot
	stopCh    chan struct{}
	stopOnce  sync.Once
	exited    chan struct{}
	exitErr   error
	artifacts *tool.Artifacts // the artifacts directory's root; nil without one; closed when the loop ends

	// Owned by the runtime goroutine.
	snap       *Snapshot
	dirty      bool
	busy       bool                // a tick is in flight
	known      map[string]struct{} // ids in RecentEventIDs
	handed     uint64              // results with Seq below this were handed to Outbox
	histBytes  int
	summary    *modelSummary // the outcome's summary while finish applies it
	stopping   bool
	acks       []*submission
	intentAcks []*intent

	mu     sync.RWMutex         // guards live and recent
	live   map[string]string    // task id → queued or running
	recent map[string]TaskState // finished results of this process, bounded
	order  []string             // recent's keys, oldest first
	// waiters are closed when their task's result is remembered (WaitTask).
	waiters map[string][]chan struct{}
}

type submission struct {
	ev    Event
	reply chan SubmitResult
}

// SubmitResult is the answer to Submit.
type SubmitResult struct {
	State     TaskState
	Duplicate bool // the id was seen before; nothing was queued
	Err       error
}

// intent asks the runtime to save a tick's progress, and for a
// non-idempotent tool about to run its pending action, before going on.
type intent struct {
	turn      *TurnLog
	action    PendingAction
	hasAction bool
	refused   bool // saved, but the tool must not start (stopping)
	reply     chan error
}

type outcome struct {
	ev       Event
	result   Result
	messages []Message
	aborted  bool  // stopped before a tool or while waiting for the model: resume after restart
	usage    Usage // tokens the task's brain requests cost
	// summary, when not nil, is the brain's summary of the messages this
	// outcome pushes out of the window.
	summary *modelSummary

	// The task's session, when it names one (see session.go).
	projectID, sessionID string
	vars                 map[string]any
}

// modelSummary is a brain's summary covering the oldest `covers` messages
// of the window, or why there is none (note).
type modelSummary struct {
	text   string
	covers int
	note   string
}

// Start hydrates the agent from its store and starts its goroutine. It
// returns once the hydrated state (and the resolution of an interrupted tick)
// is durable.
func Start(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg.setDefaults()
	if err := ValidateID(cfg.AgentID); err != nil {
		return nil, err
	}
	tools := make(map[string]tool.Tool, len(cfg.Tools))
	for _, t := range cfg.Tools {
		if t.Name == "" || t.Run == nil {
			return nil, fmt.Errorf("agent %s: tool %q has no name or no Run", cfg.AgentID, t.Name)
		}
		if _, dup := tools[t.Name]; dup {
			return nil, fmt.Errorf("agent %s: tool %q given twice", cfg.AgentID, t.Name)
		}
		tools[t.Name] = t
	}
	r := &Runtime{
		cfg:       cfg,
		tools:     tools,
		log:       cfg.Log.With().Str("agent", cfg.AgentID).Logger(),
		submitCh:  make(chan *submission, 1024),
		confirmCh: make(chan uint64, 1024),
		intentCh:  make(chan *intent),
		doneCh:    make(chan *outcome),
		snapCh:    make(chan chan *Snapshot),
		stopCh:    make(chan struct{}),
		exited:    make(chan struct{}),
		known:     map[string]struct{}{},
		live:      map[string]string{},
		recent:    map[string]TaskState{},
	}
	if ix, ok := cfg.Store.(ResultIndex); ok {
		r.index = ix
	} else {
		r.log.Warn().Msg("the store keeps no task index: finished results are queryable only while this process lives")
	}
	if cfg.ArtifactsDir != "" {
		art, err := tool.OpenArtifacts(cfg.ArtifactsDir)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", cfg.AgentID, err)
		}
		r.artifacts = art
	}
	if err := r.hydrate(ctx); err != nil {
		r.closeArtifacts()
		return nil, err
	}
	go r.loop()
	return r, nil
}

func (r *Runtime) nowMs() int64 { return r.cfg.Now().UnixMilli() }

func (r *Runtime) hydrate(ctx context.Context) error {
	s, err := r.cfg.Store.Load(ctx, r.cfg.AgentID)
	if err != nil {
		return fmt.Errorf("agent %s: load snapshot: %w", r.cfg.AgentID, err)
	}
	if s == nil {
		s = New(r.cfg.AgentID, r.nowMs())
		r.log.Info().Msg("fresh agent")
	} else {
		if s.AgentID != r.cfg.AgentID {
			return fmt.Errorf("agent %s: store returned the snapshot of %q", r.cfg.AgentID, s.AgentID)
		}
		r.log.Info().Uint64("tick", s.TickIndex).Int("queued", len(s.EventQueueBackup)).
			Int("outbox", len(s.Outbox)).Str("previous_status", string(s.Status)).
			Msgf("hydrated at tick %d with %d queued events", s.TickIndex, len(s.EventQueueBackup))
		if !s.Status.Clean() {
			r.log.Warn().Str("previous_status", string(s.Status)).
				Msg("previous run was interrupted; recovering")
		}
	}
	r.snap = s
	if s.Memory.WorkingVariables == nil {
		s.Memory.WorkingVariables = map[string]any{}
	}
	if s.Memory.ShortTermHistory == nil {
		s.Memory.ShortTermHistory = []Message{}
	}
	if s.EventQueueBackup == nil {
		s.EventQueueBackup = []Event{}
	}
	s.SchemaVersion = SchemaVersion
	if err := s.Transition(StatusStarting); err != nil {
		return err
	}
	for _, id := range s.RecentEventIDs {
		r.known[id] = struct{}{}
	}
	for _, m := range s.Memory.ShortTermHistory {
		r.histBytes += len(m.Content)
	}
	for k, v := range r.cfg.Vars {
		s.Memory.WorkingVariables[k] = v
	}
	if s.PendingAction != nil {
		if err := s.Transition(StatusRecovering); err != nil {
			return err
		}
		if r.cfg.UnknownOutcome == UnknownAskModel && r.pendingToResult() {
			// The task stays queued and resumes with the brain.
		} else {
			r.resolvePending()
		}
	}
	if err := s.Transition(StatusWaitingForEvent); err != nil {
		return err
	}
	r.enforceBudget()
	if err := r.save(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	for _, ev := range s.EventQueueBackup {
		if ev.ID != "" {
			r.live[ev.ID] = TaskQueued
		}
	}
	r.mu.Unlock()
	r.afterSave()
	return nil
}

// resolvePending turns the task whose non-idempotent tool was interrupted
// into an unknown_outcome result. The tool is never run again.
func (r *Runtime) resolvePending() {
	s := r.snap
	p := s.PendingAction
	s.PendingAction = nil
	if len(s.EventQueueBackup) == 0 || s.EventQueueBackup[0].ID != p.EventID {
		r.log.Warn().Str("event", p.EventID).Msg("pending action names no queued event; dropping it")
		return
	}
	ev := s.EventQueueBackup[0]
	out, _ := json.Marshal(map[string]any{
		"completed": p.Completed,
		"unknown":   map[string]any{"tool": p.Tool, "args": p.Args, "step": p.Step},
	})
	msg := fmt.Sprintf("the process stopped while %s was running; it may or may not have taken effect, and it is not run again", p.Tool)
	r.log.Warn().Str("task", p.TaskID).Str("tool", p.Tool).Msg("interrupted non-idempotent tool: task ends unknown_outcome")
	r.finish(&outcome{
		ev:       ev,
		result:   Result{TaskID: p.TaskID, Status: ResultUnknownOutcome, Output: out, Error: msg, Source: ev.Source},
		messages: []Message{{Role: "assistant", Content: "unknown outcome: " + msg, TaskID: p.TaskID}},
	})
}

// pendingToResult turns an interrupted non-idempotent call into a tool
// result saying its outcome is unknown, in the saved progress of its task,
// so that the brain sees it at its next step. The calls after it in the same
// reply are not run: they may depend on it. It returns false when there is
// no saved progress to put it in.
func (r *Runtime) pendingToResult() bool {
	s := r.snap
	p := s.PendingAction
	l := s.Turn
	if l == nil || l.EventID != p.EventID || len(l.Steps) == 0 ||
		len(s.EventQueueBackup) == 0 || s.EventQueueBackup[0].ID != p.EventID {
		return false
	}
	st := &l.Steps[len(l.Steps)-1]
	i := len(st.Results)
	if i >= len(st.Calls) || st.Calls[i].Tool != p.Tool {
		return false
	}
	s.PendingAction = nil
	st.Results = append(st.Results, ToolResult{CallID: st.Calls[i].ID, Tool: p.Tool,
		Error: UnknownOutcomeMessage(p.Tool)})
	for _, c := range st.Calls[i+1:] {
		st.Results = append(st.Results, ToolResult{CallID: c.ID, Tool: c.Tool,
			Error: "not run: an earlier call of the same reply has an unknown outcome"})
	}
	vars := s.Memory.WorkingVariables
	vars["unknown_outcomes"] = numberVar(vars["unknown_outcomes"]) + 1
	r.log.Warn().Str("task", p.TaskID).Str("tool", p.Tool).
		Msg("interrupted non-idempotent tool: the model is told its outcome is unknown")
	return true
}

// UnknownOutcomeMessage is the tool result the brain sees for a call of tool
// that was interrupted by a crash.
func UnknownOutcomeMessage(tool string) string {
	return "outcome unknown: the agent stopped while " + tool + " was running, so it may or may not have " +
		"taken effect; it is not run again by itself. Check before retrying."
}

// Submit queues an event and returns once it is durable (or was a
// duplicate, or was refused). The caller acknowledges its source only after
// a nil Err.
func (r *Runtime) Submit(ctx context.Context, ev Event) SubmitResult {
	sub := &submission{ev: ev, reply: make(chan SubmitResult, 1)}
	select {
	case r.submitCh <- sub:
	case <-r.exited:
		return SubmitResult{Err: ErrStopped}
	case <-ctx.Done():
		return SubmitResult{Err: ctx.Err()}
	}
	select {
	case res := <-sub.reply:
		return res
	case <-r.exited:
		// The loop may have answered just before it exited.
		select {
		case res := <-sub.reply:
			return res
		default:
			return SubmitResult{Err: ErrStopped}
		}
	case <-ctx.Done():
		// The event may still become durable; the caller must not
		// acknowledge it, and a redelivery will be a duplicate.
		return SubmitResult{Err: ctx.Err()}
	}
}

// Confirm reports that the result with this Seq reached its destination.
func (r *Runtime) Confirm(seq uint64) {
	select {
	case r.confirmCh <- seq:
	case <-r.exited:
	}
}

// Snapshot returns a copy of the current in-memory snapshot.
func (r *Runtime) Snapshot(ctx context.Context) (*Snapshot, error) {
	ch := make(chan *Snapshot, 1)
	select {
	case r.snapCh <- ch:
	case <-r.exited:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case s := <-ch:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TaskState returns the state of a task: queued or running from this
// process, done/failed/unknown_outcome from recent memory or the store's
// task index. It returns found=false for an unknown task.
func (r *Runtime) TaskState(ctx context.Context, taskID string) (TaskState, bool, error) {
	r.mu.RLock()
	st, live := r.live[taskID]
	res, rec := r.recent[taskID]
	r.mu.RUnlock()
	switch {
	case rec:
		return res, true, nil
	case live:
		return TaskState{TaskID: taskID, AgentID: r.cfg.AgentID, Status: st}, true, nil
	case r.index == nil:
		return TaskState{}, false, nil
	}
	got, err := r.index.TaskResult(ctx, r.cfg.AgentID, taskID)
	if err != nil || got == nil {
		if err != nil && !isNotFound(err) {
			return TaskState{}, false, err
		}
		return TaskState{}, false, nil
	}
	return stateOf(got), true, nil
}

// isNotFound recognises a store's not-found error without importing the
// plugin package: every ErrNotFound says "not found".
func isNotFound(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "not found" {
			return true
		}
	}
	return false
}

func stateOf(res *Result) TaskState {
	return TaskState{TaskID: res.TaskID, AgentID: res.AgentID, Status: res.Status,
		Output: res.Output, Error: res.Error, TickIndex: res.TickIndex}
}

// Stop finishes the tick in flight, saves the snapshot as STOPPED and ends
// the runtime. It returns the runtime's exit error, if any.
func (r *Runtime) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopCh) })
	select {
	case <-r.exited:
		return r.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the runtime has ended; Err then says why.
func (r *Runtime) Done() <-chan struct{} { return r.exited }

// Err is the reason the runtime ended (nil after a clean Stop).
func (r *Runtime) Err() error {
	select {
	case <-r.exited:
		return r.exitErr
	default:
		return nil
	}
}

func (r *Runtime) closeArtifacts() {
	if r.artifacts != nil {
		_ = r.artifacts.Close()
	}
}

func (r *Runtime) loop() {
	defer close(r.exited)
	defer r.closeArtifacts()
	stopCh := r.stopCh
	for {
		if r.stopping && !r.busy {
			r.exitErr = r.shutdown()
			return
		}
		r.maybeStartTick()
		// Wait for the first thing to do.
		select {
		case sub := <-r.submitCh:
			r.handleSubmit(sub)
		case seq := <-r.confirmCh:
			r.handleConfirm(seq)
		case in := <-r.intentCh:
			r.handleIntent(in)
		case out := <-r.doneCh:
			r.handleOutcome(out)
		case ch := <-r.snapCh:
			ch <- r.snap.Clone()
		case <-stopCh:
			r.stopping = true
			stopCh = nil
		}
		// Group commit: everything that arrived meanwhile rides on one save.
	drain:
		for {
			select {
			case sub := <-r.submitCh:
				r.handleSubmit(sub)
			case seq := <-r.confirmCh:
				r.handleConfirm(seq)
			case in := <-r.intentCh:
				r.handleIntent(in)
			case out := <-r.doneCh:
				r.handleOutcome(out)
			case ch := <-r.snapCh:
				ch <- r.snap.Clone()
			default:
				break drain
			}
		}
		if r.dirty {
			if err := r.save(context.Background()); err != nil {
				r.fail(err)
				return
			}
			r.afterSave()
		}
	}
}

func (r *Runtime) handleSubmit(sub *submission) {
	ev := sub.ev
	if r.stopping {
		sub.reply <- SubmitResult{Err: ErrStopping}
		return
	}
	if ev.ID != "" {
		if st, dup := r.duplicateState(ev.ID); dup {
			sub.reply <- SubmitResult{State: st, Duplicate: true}
			return
		}
	}
	if len(r.snap.EventQueueBackup) >= r.cfg.MaxQueue {
		sub.reply <- SubmitResult{Err: fmt.Errorf("%w (%d events)", ErrQueueFull, r.cfg.MaxQueue)}
		return
	}
	if ev.ReceivedAt == 0 {
		ev.ReceivedAt = r.nowMs()
	}
	r.snap.EventQueueBackup = append(r.snap.EventQueueBackup, ev)
	if ev.ID != "" {
		r.remember(ev.ID)
	}
	r.dirty = true
	sub.ev = ev
	r.acks = append(r.acks, sub)
}

// duplicateState answers whether id was seen before, and its state.
func (r *Runtime) duplicateState(id string) (TaskState, bool) {
	if _, seen := r.known[id]; !seen {
		// Older than recent_event_ids: the task index still knows it.
		if r.index != nil {
			if res, err := r.index.TaskResult(context.Background(), r.cfg.AgentID, id); err == nil && res != nil {
				return stateOf(res), true
			}
		}
		return TaskState{}, false
	}
	for _, res := range r.snap.Outbox {
		if res.TaskID == id {
			return stateOf(&res), true
		}
	}
	r.mu.RLock()
	st, live := r.live[id]
	res, rec := r.recent[id]
	r.mu.RUnlock()
	switch {
	case rec:
		return res, true
	case live:
		return TaskState{TaskID: id, AgentID: r.cfg.AgentID, Status: st}, true
	}
	for _, ev := range r.snap.EventQueueBackup {
		if ev.ID == id {
			return TaskState{TaskID: id, AgentID: r.cfg.AgentID, Status: TaskQueued}, true
		}
	}
	if r.index != nil {
		if res, err := r.index.TaskResult(context.Background(), r.cfg.AgentID, id); err == nil && res != nil {
			return stateOf(res), true
		}
	}
	// Seen, but its result has left retention.
	return TaskState{TaskID: id, AgentID: r.cfg.AgentID, Status: ResultDone}, true
}

func (r *Runtime) remember(id string) {
	s := r.snap
	s.RecentEventIDs = append(s.RecentEventIDs, id)
	r.known[id] = struct{}{}
	// Trimmed in batches of a quarter of the bound, so that a busy agent
	// does not copy the whole list on every event.
	if over := len(s.RecentEventIDs) - r.cfg.RecentIDs; over > r.cfg.RecentIDs/4 {
		for _, old := range s.RecentEventIDs[:over] {
			delete(r.known, old)
		}
		s.RecentEventIDs = append([]string(nil), s.RecentEventIDs[over:]...)
		s.RecentSeq += uint64(over)
	}
}

func (r *Runtime) handleConfirm(seq uint64) {
	out := r.snap.Outbox
	for i := range out {
		if out[i].Seq == seq {
			r.snap.Outbox = append(out[:i:i], out[i+1:]...)
			return
		}
	}
}

func (r *Runtime) handleIntent(in *intent) {
	if r.stopping {
		// Do not start a tool while stopping: the tick is abandoned and
		// resumes after the restart. The brain's reply is still saved, so
		// the brain is not asked again.
		if in.hasAction {
			in.reply <- ErrStopping
			return
		}
		in.refused = true
	}
	r.snap.Turn = in.turn
	if in.hasAction {
		p := in.action
		r.snap.PendingAction = &p
		_ = r.snap.Transition(StatusRunningTool)
	} else if r.snap.PendingAction != nil {
		// A new reply: the tool of the last pending action finished and its
		// result is in the turn.
		r.snap.PendingAction = nil
		_ = r.snap.Transition(StatusThinking)
	}
	r.dirty = true
	r.intentAcks = append(r.intentAcks, in)
}

func (r *Runtime) handleOutcome(out *outcome) {
	r.busy = false
	if out.aborted {
		r.snap.PendingAction = nil
		_ = r.snap.Transition(StatusWaitingForEvent)
		r.mu.Lock()
		r.live[out.ev.ID] = TaskQueued
		r.mu.Unlock()
		r.dirty = true
		return
	}
	r.finish(out)
}

// finish applies a tick's outcome: the event leaves the queue, the history
// and variables are updated, tick_index advances and the result enters the
// outbox. The caller saves.
func (r *Runtime) finish(out *outcome) {
	s := r.snap
	if len(s.EventQueueBackup) > 0 && s.EventQueueBackup[0].ID == out.ev.ID {
		s.EventQueueBackup = s.EventQueueBackup[1:]
		s.QueueSeq++
	}
	s.PendingAction = nil
	s.Turn = nil
	s.TickIndex++
	for _, m := range out.messages {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, m)
		r.histBytes += len(m.Content)
	}
	r.summary = out.summary
	r.enforceBudget()
	r.summary = nil
	if out.usage != (Usage{}) {
		vars := s.Memory.WorkingVariables
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
	res.AgentID = r.cfg.AgentID
	res.TickIndex = s.TickIndex
	res.FinishedAt = r.nowMs()
	s.Outbox = append(s.Outbox, res)
	applySession(s, out)
	vars := s.Memory.WorkingVariables
	vars["last_task_id"] = res.TaskID
	vars["tasks_"+res.Status] = numberVar(vars["tasks_"+res.Status]) + 1
	if s.Status != StatusStarting && s.Status != StatusRecovering {
		_ = s.Transition(StatusWaitingForEvent)
	}
	r.dirty = true
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

// enforceBudget drops the oldest messages beyond the context budget and
// summarises them into working variables.
func (r *Runtime) enforceBudget() {
	s := r.snap
	h := s.Memory.ShortTermHistory
	drop := 0
	bytes := r.histBytes
	for r.overBudget(len(h)-drop, bytes) {
		bytes -= len(h[drop].Content)
		drop++
	}
	if drop == 0 {
		return
	}
	vars := s.Memory.WorkingVariables
	if ms := r.summary; ms != nil && ms.note == "" && ms.covers == drop {
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
	r.histBytes = bytes
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

// overBudget reports whether a window of n messages holding bytes bytes of
// content is larger than the context budget.
func (r *Runtime) overBudget(n, bytes int) bool {
	return n > r.cfg.MaxMessages || (r.cfg.MaxTokens > 0 && bytes/4 > r.cfg.MaxTokens && n > 1)
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

func (r *Runtime) save(ctx context.Context) error {
	s := r.snap
	s.Timestamp = r.nowMs()
	if r.cfg.BeforeSave != nil {
		r.cfg.BeforeSave(s)
	}
	if err := r.cfg.Store.Save(ctx, s); err != nil {
		return fmt.Errorf("agent %s: save at tick %d: %w", r.cfg.AgentID, s.TickIndex, err)
	}
	if r.cfg.AfterSave != nil {
		r.cfg.AfterSave(s)
	}
	r.dirty = false
	return nil
}

// afterSave does what a save allows: acknowledge queued events, let tools
// run, publish results.
func (r *Runtime) afterSave() {
	r.mu.Lock()
	for _, sub := range r.acks {
		if sub.ev.ID != "" {
			r.live[sub.ev.ID] = TaskQueued
		}
	}
	var fresh []Result
	for _, res := range r.snap.Outbox {
		if res.Seq >= r.handed {
			fresh = append(fresh, res)
		}
	}
	for _, res := range fresh {
		delete(r.live, res.TaskID)
		r.rememberResult(stateOf(&res))
	}
	r.mu.Unlock()

	for _, sub := range r.acks {
		sub.reply <- SubmitResult{State: TaskState{TaskID: sub.ev.ID, AgentID: r.cfg.AgentID, Status: TaskQueued}}
	}
	r.acks = r.acks[:0]
	for _, in := range r.intentAcks {
		if in.refused {
			in.reply <- ErrStopping
		} else {
			in.reply <- nil
		}
	}
	r.intentAcks = r.intentAcks[:0]

	if len(fresh) > 0 {
		r.handed = fresh[len(fresh)-1].Seq + 1
		if r.cfg.Outbox != nil {
			r.cfg.Outbox.Deliver(fresh)
		} else if r.index != nil {
			// The task index holds them durably: they are delivered.
			r.snap.Outbox = r.snap.Outbox[:0]
		} else if over := len(r.snap.Outbox) - 1024; over > 0 {
			r.snap.Outbox = append([]Result(nil), r.snap.Outbox[over:]...)
		}
	}
}

// rememberResult keeps a finished result in memory; r.mu is held.
func (r *Runtime) rememberResult(st TaskState) {
	if _, ok := r.recent[st.TaskID]; !ok {
		r.order = append(r.order, st.TaskID)
	}
	r.recent[st.TaskID] = st
	r.wake(st.TaskID)
	// Trimmed in batches, as remember does: copying the whole window for
	// every result cost a busy agent more than the result itself.
	if over := len(r.order) - recentResults; over > recentResults/4 {
		for _, id := range r.order[:over] {
			delete(r.recent, id)
		}
		r.order = append([]string(nil), r.order[over:]...)
	}
}

// recentResults is how many finished results the runtime keeps in memory
// (between it and a quarter more), for duplicates and TaskState.
const recentResults = 1024

func (r *Runtime) fail(err error) {
	r.log.Error().Err(err).Msg("save failed: stopping without acknowledging; the last durable snapshot stands")
	for _, sub := range r.acks {
		sub.reply <- SubmitResult{Err: err}
	}
	r.acks = nil
	for _, in := range r.intentAcks {
		in.reply <- err
	}
	r.intentAcks = nil
	r.exitErr = err
	if r.busy {
		// Let the tick goroutine finish on its own; its outcome is
		// never applied.
		go func() {
			for {
				select {
				case <-r.doneCh:
					return
				case in := <-r.intentCh:
					in.reply <- err
				}
			}
		}()
	}
}

func (r *Runtime) shutdown() error {
	s := r.snap
	if err := s.Transition(StatusStopping); err != nil {
		return err
	}
	if err := s.Transition(StatusStopped); err != nil {
		return err
	}
	if err := r.save(context.Background()); err != nil {
		r.fail(err)
		return err
	}
	r.afterSave()
	r.log.Info().Uint64("tick", s.TickIndex).Int("queued", len(s.EventQueueBackup)).Msg("stopped cleanly")
	return nil
}

func (r *Runtime) maybeStartTick() {
	s := r.snap
	if r.busy || r.stopping || len(s.EventQueueBackup) == 0 {
		return
	}
	ev := s.EventQueueBackup[0]
	if err := s.Transition(StatusThinking); err != nil {
		r.log.Error().Err(err).Msg("cannot start tick")
		return
	}
	r.busy = true
	r.mu.Lock()
	if ev.ID != "" {
		r.live[ev.ID] = TaskRunning
	}
	r.mu.Unlock()
	// The tick reads the history while this goroutine waits for its
	// outcome: no element changes meanwhile, and a clipped slice makes any
	// append go to a new array, so the window is shared, not copied.
	h := s.Memory.ShortTermHistory
	in := tickInput{ev: ev, history: h[:len(h):len(h)], histBytes: r.histBytes}
	in.memory, _ = s.Memory.WorkingVariables["history_summary"].(string)
	if s.Turn != nil && s.Turn.EventID == ev.ID {
		in.turn = s.Turn.Clone()
	}
	go r.tick(in)
}

// ID returns the agent id.
func (r *Runtime) ID() string { return r.cfg.AgentID }
