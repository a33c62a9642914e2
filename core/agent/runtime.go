package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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
// snapshot (plugin.TaskIndex). TaskResult returns an error wrapping
// ErrNotFound for a task it does not know.
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

// ErrNotFound is returned by ResultIndex.TaskResult for an unknown task, or
// one whose result has left retention (plugin.ErrNotFound is the same value).
var ErrNotFound = errors.New("not found")

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
	// Current is where a running task is (GET /agents/{id}/tasks/{task_id}
	// while it runs); never in a result.
	Current *Current `json:"current,omitempty"`
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
	// called from the goroutine that runs the tick (the runtime's own for
	// a quick brain's task that calls no tool) and must not block.
	OnProgress func(taskID string, percent int, phase string)
	Log        zerolog.Logger
	Now        func() time.Time

	// RecentIDs bounds recent_event_ids; default 1024.
	RecentIDs int

	// UnknownOutcome says what becomes of a task whose non-idempotent
	// tool was interrupted by a crash: UnknownEndTask (default) ends it as
	// unknown_outcome; UnknownAskModel hands the brain a tool result
	// saying the outcome is unknown and lets it decide; UnknownApproval
	// puts it before an operator through Decider when the task belongs to
	// a project's session (and ends it unknown_outcome, saying why, when
	// it does not or there is no Decider).
	UnknownOutcome string
	// Decider raises and reads the approvals of UnknownApproval; nil:
	// there is nobody to ask.
	Decider Decider
	// DecisionPoll is how often a task waiting for an operator's decision
	// asks for it; default 1s.
	DecisionPoll time.Duration
	// RetryMin and RetryMax bound the wait between attempts while the
	// model server is unreachable; defaults 1s and 1m. The wait doubles
	// from RetryMin, with jitter.
	RetryMin, RetryMax time.Duration
	// SummaryTimeout bounds the brain's summary of the messages leaving
	// the context window; default 2m.
	SummaryTimeout time.Duration
	// QuickWait is how long a save may wait when the brain is Quick: for
	// the tick in flight, so that an event is accepted, thought about, acted
	// on and saved in one commit, and only then acknowledged and its result
	// published; and for as many events as the last commits acknowledged,
	// so that concurrent clients share saves (group commit). A tick that
	// takes longer (a slow idempotent tool) has its event saved and
	// acknowledged when the wait runs out, as a slow brain has at once. A
	// non-idempotent tool's intent is saved before it runs in every case.
	// Default 10ms, which an echo tick fits in even on a loaded board;
	// negative: the brain is treated as slow (every event is saved and
	// acknowledged before its tick starts, every reply saved before its
	// calls run).
	QuickWait time.Duration

	// BeforeSave is called on the runtime's goroutine just before every
	// Save, AfterSave just after every Save that succeeded. The daemon's
	// agents time their saves with them (the save latency histogram of
	// /metrics); tests catch the snapshot of a chosen instant. They must not
	// block, and must not modify s or keep it (Clone it).
	BeforeSave func(s *Snapshot)
	AfterSave  func(s *Snapshot)
}

// The defaults of a template's limits (core/design's Limits takes them
// from here): the runtime applies them to a zero Config field, the design
// layer to a zero field of a template's limits.
const (
	DefaultMaxSteps    = 8                // brain steps per task
	DefaultMaxQueue    = 10000            // queued events before Submit fails with ErrQueueFull
	DefaultToolTimeout = 30 * time.Second // per tool call
)

func (c *Config) setDefaults() {
	if c.MaxMessages <= 0 {
		c.MaxMessages = 200
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = DefaultMaxSteps
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = DefaultToolTimeout
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
	if c.QuickWait == 0 {
		c.QuickWait = 10 * time.Millisecond
	}
	if c.UnknownOutcome == "" {
		c.UnknownOutcome = UnknownEndTask
	}
	if c.RetryMin <= 0 {
		c.RetryMin = time.Second
	}
	if c.DecisionPoll <= 0 {
		c.DecisionPoll = time.Second
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(time.Minute, c.RetryMin)
	}
}

// What becomes of an interrupted non-idempotent tool (Config.UnknownOutcome).
const (
	UnknownEndTask  = "end_task"  // the task ends unknown_outcome
	UnknownAskModel = "ask_model" // the brain sees "outcome unknown" as the tool's result
	UnknownApproval = "approval"  // an operator decides (tasks of a session); else the task ends unknown_outcome
)

// Runtime runs one agent: one goroutine owns the snapshot and performs every
// change and starts every Save (in a busy spell the Save itself runs on a
// goroutine of its own, on a copy: launch); the brain and the tools of a
// tick run on a second goroutine and hand their outcome back, except a
// quick brain's tick that calls no tool, which runs on the first
// (tickInline). Nothing outside that goroutine reads or writes the
// snapshot.
type Runtime struct {
	cfg   Config
	tools map[string]tool.Tool // cfg.Tools by name
	lim   limits               // cfg's bounds; read by the tick goroutine too
	log   zerolog.Logger
	index ResultIndex // nil when the store keeps no results

	submitCh chan *submission
	// confirmed holds the Seqs Confirm reported and the runtime's goroutine
	// has not yet dropped from the outbox; a confirmation does not wake it
	// (the change rides on the next save, which it does not cause).
	confirmMu sync.Mutex
	confirmed []uint64
	anyConf   atomic.Bool // confirmed is not empty
	intentCh  chan *intent
	doneCh    chan *outcome
	snapCh    chan chan *Snapshot
	stopCh    chan struct{}
	stopOnce  sync.Once
	exited    chan struct{}
	exitErr   error
	artifacts *tool.Artifacts // the artifacts directory's root; nil without one; closed when the loop ends

	quick  bool // the brain is Quick and QuickWait positive
	inline bool // quick, and the brain no Summarizer: ticks start on the runtime's goroutine (tickInline)

	// Owned by the runtime goroutine.
	st       *state
	dirty    bool   // st changed since the last save
	busy     bool   // a tick is in flight
	tickID   string // the event id of the tick in flight
	handed   uint64 // results with Seq below this were handed to Outbox
	stopping bool
	waiting  // what the next save releases
	// The quick path: while holding, the save waits for the quick tick in
	// flight, until holdTimer fires (expired) or the next commit.
	holding, expired bool
	holdTimer        *time.Timer
	// batches are the numbers of events the last two commits that
	// acknowledged any acknowledged: the clients they answered are likely
	// to send their next event soon. Forgotten when none came within
	// QuickWait of the last acknowledgement (answered): those clients are
	// not waiting to send, and a save held for them would wait QuickWait
	// out at the start of every burst (BenchmarkMQTTIngress: 10–15 ms of
	// each round of 2,000 tasks, docs/figures.md).
	batches  [2]int
	answered time.Time
	// loneSaves counts the saves in a row that made at most one event
	// durable, up to busyWindow (BusySave).
	loneSaves int
	// flight is the save in progress on its own goroutine, nil when none.
	flight *flight

	cur current // the task in hand (Current)

	mu     sync.RWMutex         // guards live and recent
	live   map[string]string    // task id → queued or running
	recent map[string]TaskState // finished results of this process, bounded
	order  []string             // recent's keys, oldest first
	// waiters are closed when their task's result is remembered (WaitTask).
	waiters map[string][]chan struct{}
}

// flight is a save running on a goroutine of its own while the runtime's
// goroutine goes on: what it releases when it lands.
type flight struct {
	snap *Snapshot // the copy being saved
	waiting
	done chan error
}

// waiting is what a save releases (release) once it has returned.
type waiting struct {
	acks       []*submission // accepted events
	intentAcks []*intent     // intents
	dupAcks    []dupAck      // duplicates of events not yet durable
}

type submission struct {
	ev    Event
	reply chan SubmitResult
	done  func(SubmitResult) // SubmitAsync's; nil: reply
}

// answer gives the submitter its result.
func (s *submission) answer(res SubmitResult) {
	if s.done != nil {
		s.done(res)
		return
	}
	s.reply <- res
}

// dupAck is a duplicate answered once the state it was seen in is durable.
type dupAck struct {
	sub   *submission
	state TaskState
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
		loneSaves: busyWindow,
		cfg:       cfg,
		tools:     tools,
		lim:       cfg.limits(),
		log:       cfg.Log.With().Str("agent", cfg.AgentID).Logger(),
		submitCh:  make(chan *submission, 1024),
		// Buffered, every one, so that pending sees what was sent; one
		// tick runs at a time, with at most one intent or outcome.
		intentCh: make(chan *intent, 1),
		doneCh:   make(chan *outcome, 1),
		snapCh:   make(chan chan *Snapshot, 16),
		stopCh:   make(chan struct{}),
		exited:   make(chan struct{}),
		live:     map[string]string{},
		recent:   map[string]TaskState{},
	}
	if q, ok := cfg.Brain.(Quick); ok && q.Quick() && cfg.QuickWait > 0 {
		r.quick = true
		r.holdTimer = time.NewTimer(time.Hour)
		r.holdTimer.Stop()
		_, sums := cfg.Brain.(Summarizer)
		r.inline = !sums
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
	r.st = newState(s, r.cfg.limits())
	s.SchemaVersion = SchemaVersion
	if err := s.Transition(StatusStarting); err != nil {
		return err
	}
	for k, v := range r.cfg.Vars {
		s.Memory.WorkingVariables[k] = v
	}
	if p := s.PendingAction; p != nil {
		if err := s.Transition(StatusRecovering); err != nil {
			return err
		}
		switch {
		case r.cfg.UnknownOutcome == UnknownAskModel && r.st.pendingToResult():
			// The task stays queued and resumes with the brain.
			r.log.Warn().Str("task", p.TaskID).Str("tool", p.Tool).
				Msg("interrupted non-idempotent tool: the model is told its outcome is unknown")
		case r.cfg.UnknownOutcome == UnknownApproval && r.cfg.Decider != nil && r.st.pendingInSession() && r.st.pendingToApproval():
			// The task stays queued; its tick raises the approval.
			r.log.Warn().Str("task", p.TaskID).Str("tool", p.Tool).
				Msg("interrupted non-idempotent tool: an operator is asked to decide (approval)")
		case r.st.resolvePending(r.nowMs(), r.noApprovalReason()):
			r.log.Warn().Str("task", p.TaskID).Str("tool", p.Tool).Msg("interrupted non-idempotent tool: task ends unknown_outcome")
		default:
			r.log.Warn().Str("event", p.EventID).Msg("pending action names no queued event; dropping it")
		}
	}
	if err := s.Transition(StatusWaitingForEvent); err != nil {
		return err
	}
	r.st.enforceBudget(nil)
	// Hydrated events were acknowledged by an earlier process: they are
	// queued as soon as this state is durable.
	r.mu.Lock()
	for _, ev := range s.EventQueueBackup {
		if ev.ID != "" {
			r.live[ev.ID] = TaskQueued
		}
	}
	r.mu.Unlock()
	return r.commit(ctx, false)
}

// noApprovalReason says why a task whose template chose an operator's
// approval for an unknown outcome ends unknown_outcome instead; "" for the
// other choices. The caller is hydrate, with a pending action.
func (r *Runtime) noApprovalReason() string {
	if r.cfg.UnknownOutcome != UnknownApproval {
		return ""
	}
	switch {
	case !r.st.pendingInSession():
		return "unknown_outcome is approval, but the task belongs to no project session, so no approval can be raised: the result is for the operator"
	case r.cfg.Decider == nil:
		return "unknown_outcome is approval, but this agent runs without a daemon's session continuity to raise an approval in"
	}
	return "unknown_outcome is approval, but the task's progress was not saved with the call"
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

// SubmitAsync is Submit without waiting: done is called once, with what
// Submit would have returned, on the runtime's goroutine (then it must not
// block) or on the caller's. The caller acknowledges its source only after a
// nil Err, as with Submit. Submissions of one caller are queued in the order
// it made them.
func (r *Runtime) SubmitAsync(ctx context.Context, ev Event, done func(SubmitResult)) {
	sub := &submission{ev: ev, done: done}
	select {
	case r.submitCh <- sub:
	case <-r.exited:
		done(SubmitResult{Err: ErrStopped})
		return
	case <-ctx.Done():
		done(SubmitResult{Err: ctx.Err()})
		return
	}
	select {
	case <-r.exited:
		// Sent while or after the loop ended: whatever is still queued
		// is answered here (by whichever caller finds it).
		r.drainSubmits()
	default:
	}
}

// drainSubmits answers the submissions left in submitCh once the loop has
// ended.
func (r *Runtime) drainSubmits() {
	for {
		select {
		case sub := <-r.submitCh:
			sub.answer(SubmitResult{Err: ErrStopped})
		default:
			return
		}
	}
}

// Confirm reports that the result with this Seq reached its destination.
// It never blocks and does not wake the runtime: the result leaves the
// outbox before the next save.
func (r *Runtime) Confirm(seq uint64) {
	r.confirmMu.Lock()
	r.confirmed = append(r.confirmed, seq)
	r.anyConf.Store(true)
	r.confirmMu.Unlock()
}

// takeConfirmed drops the confirmed results from the outbox; the runtime's
// goroutine calls it before it saves or shows the snapshot.
func (r *Runtime) takeConfirmed() {
	if !r.anyConf.Load() {
		return
	}
	r.confirmMu.Lock()
	seqs := r.confirmed
	r.confirmed = nil
	r.anyConf.Store(false)
	r.confirmMu.Unlock()
	for _, seq := range seqs {
		r.st.confirm(seq)
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
	case <-r.exited:
		// The request may sit unread in the buffer of a runtime that ended.
		select {
		case s := <-ch:
			return s, nil
		default:
			return nil, ErrStopped
		}
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

// isNotFound reports whether err says the task index has no such task.
func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

func (r *Runtime) loop() {
	defer func() {
		close(r.exited)
		r.drainSubmits() // what SubmitAsync queued meanwhile
	}()
	defer r.closeArtifacts()
	yielded := false // the save due has let the others send (below)
	for {
		if r.exitErr != nil {
			return // a save in flight failed (land)
		}
		if r.stopping && !r.busy {
			r.exitErr = r.shutdown()
			return
		}
		for r.maybeStartTick() {
			// A quick tick ran here to its end: start the next queued
			// one, unless QuickWait ran out meanwhile (the save is due).
			if r.holding && !r.expired {
				select {
				case <-r.holdTimer.C:
					r.expired = true
				default:
				}
			}
			// A save that landed meanwhile answers its events now, not
			// after the rest of the queue's ticks; those go on if they
			// may (maybeStartTick), as they would have without it.
			if r.landed() && r.exitErr != nil {
				break
			}
		}
		if r.exitErr != nil {
			return // the save that landed failed
		}
		if r.dirty && !r.held() && r.flight == nil {
			// Group commit with one processor: a goroutine that sends to
			// the runtime wakes this one first (the scheduler runs the
			// woken goroutine next), so the other senders already made
			// runnable (HTTP handlers whose requests came in together)
			// had not sent yet when pending() looked, and each save took
			// one task while the others waited for it: HTTP at 8 clients
			// fell to half its rate when the save's fsync held the
			// processor throughout (docs/figures.md, "the runtime's
			// monitor thread"). Yield once, take what they sent (up to
			// drainBatch), then save (once: a stream that never stops
			// must not put the save off).
			if !yielded {
				yielded = true
				runtime.Gosched()
				if r.pending() {
					r.receiveSome()
					continue
				}
			}
			yielded = false
			if r.commit(context.Background(), true) != nil {
				return
			}
			continue // the save may let a tick start
		}
		r.receive() // the first thing to do
		// Group commit: what arrived meanwhile rides on one save.
		r.receiveSome()
	}
}

// drainBatch bounds the messages one drain receives before the loop goes
// back to its ticks and its save. While senders keep the channels full (a
// broker forwarding a burst of tasks), a drain that took every message
// there was would never end: the save that landed meanwhile would wait
// for the burst to end before the next one could start, and the tasks
// taken would wait as queued events instead of running their ticks
// beside the save (BenchmarkMQTTIngress: a save of 1,300 tasks started
// 18 ms after the one before it had landed; docs/figures.md).
const drainBatch = 64

// receiveSome receives up to drainBatch of the messages already waiting.
func (r *Runtime) receiveSome() {
	for n := 0; n < drainBatch && r.pending(); n++ {
		r.receive()
	}
}

// landed lands the save in flight if it has returned, and reports whether
// it did.
func (r *Runtime) landed() bool {
	if r.flight == nil {
		return false
	}
	select {
	case err := <-r.flight.done:
		r.land(err)
		return true
	default:
		return false
	}
}

// held reports whether the save waits, on the quick path: for the quick
// tick in flight (its event, and what arrived meanwhile, are then saved with
// its outcome in one commit), and then for as many events as the last
// commits acknowledged (group commit: the clients they answered are sending
// their next). An intent waiting for its save, a stop, or the end of
// QuickWait end the wait; a single client never waits for another.
func (r *Runtime) held() bool {
	if !r.holding || r.expired || len(r.intentAcks) > 0 || r.stopping {
		return false
	}
	return r.busy || len(r.acks) < max(r.batches[0], r.batches[1])
}

// receive waits for one message to the runtime's goroutine and handles it.
func (r *Runtime) receive() {
	stopCh := r.stopCh
	if r.stopping {
		stopCh = nil
	}
	var holdC <-chan time.Time
	if r.holding && !r.expired {
		holdC = r.holdTimer.C
	}
	var landC chan error
	if r.flight != nil {
		landC = r.flight.done
	}
	select {
	case err := <-landC:
		r.land(err)
	case sub := <-r.submitCh:
		r.handleSubmit(sub)
	case in := <-r.intentCh:
		r.handleIntent(in)
	case out := <-r.doneCh:
		r.handleOutcome(out)
	case ch := <-r.snapCh:
		r.takeConfirmed()
		ch <- r.st.snap.Clone()
	case <-holdC:
		r.expired = true
	case <-stopCh:
		r.stopping = true
	}
}

// pending reports whether a message is waiting; every channel receive
// reads is buffered, so a sender that has sent is seen here.
func (r *Runtime) pending() bool {
	return len(r.submitCh) > 0 || len(r.intentCh) > 0 ||
		len(r.doneCh) > 0 || len(r.snapCh) > 0
}

// commit saves the state and then releases what waited for the save. If
// the save fails, nothing is released: the runtime fails. A save in flight
// lands first (saves are made one at a time, in order). With overlap, in a
// busy spell (BusySave), the save is launched on a goroutine of its own and
// commit returns at once: receive lands it (land).
func (r *Runtime) commit(ctx context.Context, overlap bool) error {
	if r.flight != nil {
		if err := r.land(<-r.flight.done); err != nil {
			return err
		}
	}
	if r.holding {
		r.holdTimer.Stop()
		r.holding, r.expired = false, false
	}
	if n := len(r.acks); n > 0 {
		r.batches = [2]int{r.batches[1], n}
		if n > 1 {
			r.loneSaves = 0
		} else if r.loneSaves < busyWindow {
			r.loneSaves++
		}
	}
	if r.loneSaves < busyWindow {
		ctx = WithBusySave(ctx)
		if overlap {
			r.launch(ctx)
			return nil
		}
	}
	if err := r.save(ctx); err != nil {
		r.fail(err)
		return err
	}
	r.release(r.st.snap, &r.waiting)
	return nil
}

// launch starts the save of the state on a goroutine of its own, the
// flight, and hands it what the save releases. The store saves a copy: the
// state goes on changing meanwhile (the next events are accepted, their
// ticks run), to be saved by the next commit once this one has landed.
//
// Why: in a busy spell the runtime's goroutine was the agent's bottleneck,
// and it spent a third of its time waiting for the save's fsync, during
// which nothing else of the agent moved (BenchmarkMQTTIngress: the agent at
// 0.65–0.8 of the bare relay's rate; docs/figures.md).
func (r *Runtime) launch(ctx context.Context) {
	r.beginSave()
	f := &flight{snap: r.st.copyForSave(), waiting: r.waiting, done: make(chan error, 1)}
	r.waiting = waiting{}
	r.dirty = false
	r.flight = f
	store, id := r.cfg.Store, r.cfg.AgentID
	go func() {
		if err := store.Save(ctx, f.snap); err != nil {
			f.done <- saveError(id, f.snap, err)
			return
		}
		f.done <- nil
	}()
	// The new goroutine waits in this processor's run queue until this
	// one blocks or is preempted (up to 10 ms), unless an idle processor
	// takes it, and in a burst this one does not block (there is always a
	// next message to take) and no processor is idle. Yield, so that the
	// save starts now (BenchmarkMQTTIngress through Mosquitto:
	// saves began up to 5.7 ms after their launch, 0.33 ms at most with
	// the yield; docs/figures.md).
	runtime.Gosched()
}

// beginSave readies the state for a save and returns it: the confirmed
// results leave the outbox, the time is set, BeforeSave is called.
func (r *Runtime) beginSave() *Snapshot {
	r.takeConfirmed()
	s := r.st.snap
	s.Timestamp = r.nowMs()
	if r.cfg.BeforeSave != nil {
		r.cfg.BeforeSave(s)
	}
	return s
}

// saveError is the error of a failed save of s.
func saveError(agentID string, s *Snapshot, err error) error {
	return fmt.Errorf("agent %s: save at tick %d: %w", agentID, s.TickIndex, err)
}

// land ends the flight with err, its save's outcome: it releases what the
// save made durable, or fails the runtime (nothing is released, and what
// waited for a later save fails with it).
func (r *Runtime) land(err error) error {
	f := r.flight
	r.flight = nil
	if err != nil {
		r.acks = append(f.acks, r.acks...)
		r.intentAcks = append(f.intentAcks, r.intentAcks...)
		r.dupAcks = append(f.dupAcks, r.dupAcks...)
		r.fail(err)
		return err
	}
	if r.cfg.AfterSave != nil {
		r.cfg.AfterSave(f.snap)
	}
	r.release(f.snap, &f.waiting)
	return nil
}

func (r *Runtime) handleSubmit(sub *submission) {
	ev := sub.ev
	if r.stopping {
		sub.answer(SubmitResult{Err: ErrStopping})
		return
	}
	if ev.ID != "" {
		if st, dup := r.st.duplicate(ev.ID, r.memoryState, r.indexState); dup {
			if r.dirty {
				// The state it was seen in may not be durable yet: its
				// source is acknowledged after the next save.
				r.dupAcks = append(r.dupAcks, dupAck{sub: sub, state: st})
				return
			}
			if r.flight != nil {
				r.flight.dupAcks = append(r.flight.dupAcks, dupAck{sub: sub, state: st})
				return
			}
			sub.answer(SubmitResult{State: st, Duplicate: true})
			return
		}
	}
	if ev.ReceivedAt == 0 {
		ev.ReceivedAt = r.nowMs()
	}
	if err := r.st.accept(ev); err != nil {
		sub.answer(SubmitResult{Err: err})
		return
	}
	r.dirty = true
	sub.ev = ev
	r.acks = append(r.acks, sub)
}

// memoryState is the state of a task this process knows: running, queued
// after a save, or finished and remembered.
func (r *Runtime) memoryState(id string) (TaskState, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if res, ok := r.recent[id]; ok {
		return res, true
	}
	if st, ok := r.live[id]; ok {
		return TaskState{TaskID: id, AgentID: r.cfg.AgentID, Status: st}, true
	}
	return TaskState{}, false
}

// indexState is the state of a finished task in the store's task index.
func (r *Runtime) indexState(id string) (TaskState, bool) {
	if r.index == nil {
		return TaskState{}, false
	}
	res, err := r.index.TaskResult(context.Background(), r.cfg.AgentID, id)
	if err != nil || res == nil {
		return TaskState{}, false
	}
	return stateOf(res), true
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
	var action *PendingAction
	if in.hasAction {
		action = &in.action
	}
	r.st.intend(in.turn, action)
	r.dirty = true
	r.intentAcks = append(r.intentAcks, in)
}

func (r *Runtime) handleOutcome(out *outcome) {
	r.busy = false
	r.tickID = ""
	if out.aborted {
		r.st.abort()
		if out.ev.ID != "" && !r.unacked(out.ev.ID) {
			r.mu.Lock()
			r.live[out.ev.ID] = TaskQueued
			r.mu.Unlock()
		}
	} else {
		r.st.finish(out, r.nowMs())
	}
	r.dirty = true
}

func (r *Runtime) save(ctx context.Context) error {
	s := r.beginSave()
	if err := r.cfg.Store.Save(ctx, s); err != nil {
		return saveError(r.cfg.AgentID, s, err)
	}
	if r.cfg.AfterSave != nil {
		r.cfg.AfterSave(s)
	}
	r.dirty = false
	return nil
}

// release does what a save allows, in this order: acknowledge the events it
// made durable, let the tools waiting on their intent run, and deliver the
// results it made durable (to TaskState and WaitTask, then to the Outbox).
// w is what waited for that save: the runtime's own, or a flight's.
func (r *Runtime) release(s *Snapshot, w *waiting) {
	r.mu.Lock()
	for _, sub := range w.acks {
		if sub.ev.ID != "" {
			r.live[sub.ev.ID] = TaskQueued
		}
	}
	if _, durable := r.live[r.tickID]; r.busy && r.tickID != "" && durable {
		// A quick tick runs on an event this save, or an earlier one, made
		// durable (not on one taken while this save was in flight).
		r.live[r.tickID] = TaskRunning
	}
	var fresh []Result
	for _, res := range s.Outbox {
		if res.Seq >= r.handed {
			fresh = append(fresh, res)
		}
	}
	for _, res := range fresh {
		delete(r.live, res.TaskID)
		r.rememberResult(stateOf(&res))
	}
	r.mu.Unlock()

	for _, sub := range w.acks {
		sub.answer(SubmitResult{State: TaskState{TaskID: sub.ev.ID, AgentID: r.cfg.AgentID, Status: TaskQueued}})
	}
	if len(w.acks) > 0 {
		r.answered = time.Now()
	}
	w.acks = w.acks[:0]
	for _, d := range w.dupAcks {
		st := d.state
		if now, ok := r.st.duplicate(d.sub.ev.ID, r.memoryState, r.indexState); ok {
			st = now
		}
		d.sub.answer(SubmitResult{State: st, Duplicate: true})
	}
	w.dupAcks = w.dupAcks[:0]
	for _, in := range w.intentAcks {
		if in.refused {
			in.reply <- ErrStopping
		} else {
			in.reply <- nil
		}
	}
	w.intentAcks = w.intentAcks[:0]

	if len(fresh) > 0 {
		r.handed = fresh[len(fresh)-1].Seq + 1
		if r.cfg.Outbox != nil {
			r.cfg.Outbox.Deliver(fresh)
		} else if live := r.st.snap; r.index != nil {
			// The task index holds them durably: they are delivered.
			i := 0
			for i < len(live.Outbox) && live.Outbox[i].Seq < r.handed {
				i++
			}
			live.Outbox = live.Outbox[i:]
		} else if over := len(live.Outbox) - 1024; over > 0 {
			live.Outbox = append([]Result(nil), live.Outbox[over:]...)
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
		sub.answer(SubmitResult{Err: err})
	}
	r.acks = nil
	for _, in := range r.intentAcks {
		in.reply <- err
	}
	r.intentAcks = nil
	for _, d := range r.dupAcks {
		d.sub.answer(SubmitResult{Err: err})
	}
	r.dupAcks = nil
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

// shutdown saves the snapshot as STOPPED, with whatever is still queued.
func (r *Runtime) shutdown() error {
	s := r.st.snap
	if err := s.Transition(StatusStopping); err != nil {
		return err
	}
	if err := s.Transition(StatusStopped); err != nil {
		return err
	}
	if err := r.commit(context.Background(), false); err != nil {
		return err
	}
	r.log.Info().Uint64("tick", s.TickIndex).Int("queued", len(s.EventQueueBackup)).Msg("stopped cleanly")
	return nil
}

// maybeStartTick starts the tick of the first queued event when none is in
// flight. A tick starts on a durable state, except a quick one: it may run
// before its event is saved, the save then waiting for it (held). It
// returns true when the tick ran to its end on this goroutine (tickInline)
// and its outcome is applied.
func (r *Runtime) maybeStartTick() bool {
	s := r.st.snap
	if r.busy || r.stopping || len(s.EventQueueBackup) == 0 {
		return false
	}
	// Once QuickWait ran out the save is due, and a quick tick waits for
	// it; but while a save is in flight, the next cannot start before it
	// lands anyway, and a tick run meanwhile delays nothing: its task is
	// saved with its result instead of as a queued event, and no later.
	quick := r.quick && (!r.expired || r.flight != nil)
	if (r.dirty || r.flight != nil) && !quick {
		return false // saved first
	}
	ev := s.EventQueueBackup[0]
	if err := s.Transition(StatusThinking); err != nil {
		r.log.Error().Err(err).Msg("cannot start tick")
		return false
	}
	r.busy = true
	r.tickID = ev.ID
	if ev.ID != "" && !r.unacked(ev.ID) {
		// Not yet durable: release marks it running after the save.
		r.mu.Lock()
		r.live[ev.ID] = TaskRunning
		r.mu.Unlock()
	}
	if quick && !r.holding {
		r.holding = true
		r.holdTimer.Reset(r.cfg.QuickWait)
		if time.Since(r.answered) > r.cfg.QuickWait {
			r.batches = [2]int{}
		}
	}
	// The tick reads the history while this goroutine waits for its
	// outcome: no element changes meanwhile, and a clipped slice makes any
	// append go to a new array, so the window is shared, not copied.
	h := s.Memory.ShortTermHistory
	in := tickInput{ev: ev, history: h[:len(h):len(h)], histBytes: r.st.histBytes}
	in.memory, _ = s.Memory.WorkingVariables["history_summary"].(string)
	if ev.Type == "task" {
		in.resume = resumeFor(ev.ID, ev.Payload)
	}
	if s.Turn != nil && s.Turn.EventID == ev.ID {
		in.turn = s.Turn.Clone()
	}
	if quick && r.inline {
		if out := r.tickInline(in); out != nil {
			r.handleOutcome(out)
			return true
		}
		return false // it runs on a goroutine of its own
	}
	go r.tick(in)
	return false
}

// unacked reports whether the event id was accepted but is not durable
// yet: not saved, or its save still in flight. live holds every event a
// save made durable until its result is (and is written on this goroutine
// only, so read here without the lock).
func (r *Runtime) unacked(id string) bool {
	_, durable := r.live[id]
	return !durable
}

// ID returns the agent id.
func (r *Runtime) ID() string { return r.cfg.AgentID }

// busyWindow is how many saves in a row, each making at most one event
// durable, end a busy spell (BusySave).
const busyWindow = 8

type busySaveKey struct{}

// BusySave reports whether the save of ctx (Storage.Save's) comes in a busy
// spell: one of the last busyWindow saves that made events durable made
// several at once, so events come in while a save waits for the disk, and
// would join the next save if the agent could read them meanwhile. An agent
// runs on one processor (cmd/openstarry), which a plain fsync holds; a
// store that can wait for its sync without holding it (storage/bbolt on
// Linux: its journal's sync through AIO, waited for in the poller) does so
// then. Out of a busy spell (one client, one task at a time) nothing comes
// in during the sync, and the plain call, one context switch and no kernel
// worker, answers sooner.
func BusySave(ctx context.Context) bool {
	busy, _ := ctx.Value(busySaveKey{}).(bool)
	return busy
}

// WithBusySave returns ctx for a save in a busy spell (BusySave): the
// runtime's, and a store's tests'.
func WithBusySave(ctx context.Context) context.Context {
	return context.WithValue(ctx, busySaveKey{}, true)
}
