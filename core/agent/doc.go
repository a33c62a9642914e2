// Package agent is the kernel: the AgentSnapshot of the storage contract,
// the status machine, and the Runtime that runs one agent's ticks and saves
// its whole state at the end of each (Save-After-Write). It does no I/O of
// its own: the host hands it a Store, a Brain and the resolved tools
// (Config), and it links no network client and nothing of the daemon.
//
// # Goroutines
//
// One goroutine owns the snapshot (the runtime's loop): it applies every
// change and starts every Save. In a busy spell (BusySave) a Save runs on a
// goroutine of its own, on a copy of the state (the flight), while the
// loop takes the next events and runs their ticks; the next Save starts
// once it has landed, so saves still happen one at a time, in order, and
// what one releases is released only when it has returned (land). Out of
// a busy spell the loop saves itself. A tick's brain and tools run on a second
// goroutine, which never touches the snapshot; it hands its progress
// (intents) and its outcome back over channels. A quick brain's tick that
// calls no tool (an echo task) runs on the loop's goroutine itself, reading
// the snapshot only as the second goroutine would (tickInline). Submit,
// Confirm, Snapshot, TaskState and WaitTask may be called from any goroutine.
//
// # Order
//
// An event (a task from MQTT, HTTP, a listener, a worker's result):
//
//	enqueue → save → acknowledge
//
// Submit appends the event to event_queue_backup and returns only after a
// Save that holds it: the caller acknowledges its source (MQTT PUBACK, HTTP
// 202) after that, never before. Events that arrive while a save runs ride
// on the next one (group commit); in a busy spell their ticks run meanwhile
// too, and their outcomes ride on the same next save.
//
// A tick, one event at a time, in queue order:
//
//	think → act → save → publish
//
// The brain is asked (think); the tools it calls run (act), each
// non-idempotent one only after a save that holds its pending_action; the
// outcome is applied (the event leaves the queue, history and variables
// change, tick_index advances, the result enters the outbox) and saved;
// only then is the result handed to the Outbox and reported by TaskState.
//
// One function, commit, is the only way anything leaves the kernel: it
// saves, then releases (acknowledges the events the save made durable, lets
// the tools whose intent it made durable start, delivers the results it
// made durable). If the save fails, nothing is released: the runtime stops
// with the error and the last durable snapshot stands.
//
// # Invariants
//
//   - Nothing is told before it is durable: no acknowledgement, tool start
//     or result precedes the Save that holds it.
//   - A non-idempotent tool runs at most once: its pending_action is durable
//     before it starts, and a process that finds one on hydration ends the
//     task unknown_outcome (or tells the brain the outcome is unknown)
//     instead of running it again.
//   - tick_index only grows, by one per finished event.
//   - An event id is accepted once: an id in recent_event_ids, the outbox,
//     the queue or the task index is a duplicate, answered with its current
//     state and never run again.
//   - short_term_history stays within the context budget; what leaves it is
//     summarised into working_variables.history_summary.
//   - A result leaves the outbox only after its delivery was confirmed
//     (Runtime.Confirm) or the store's task index holds it.
//
// The state transitions themselves (accept, duplicate detection, finish,
// the budget, recovery of an interrupted tick) are pure methods of an
// unexported state type, with no I/O and no goroutine, tested by tables.
package agent
