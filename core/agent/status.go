package agent

import "fmt"

// Status is the agent's state-machine status as saved in the snapshot.
type Status string

// The statuses. A snapshot saved by a clean shutdown says STOPPED; any other
// status found at startup means the process was interrupted.
const (
	StatusStarting        Status = "STARTING"          // hydrating, before the first save of this run
	StatusRecovering      Status = "RECOVERING"        // resolving an interrupted tick
	StatusWaitingForEvent Status = "WAITING_FOR_EVENT" // idle, queue empty or between ticks
	StatusThinking        Status = "THINKING"          // a tick is asking the brain
	StatusRunningTool     Status = "RUNNING_TOOL"      // a tick is running a tool
	StatusStopping        Status = "STOPPING"          // finishing the current tick before exit
	StatusStopped         Status = "STOPPED"           // closed cleanly
	StatusFailed          Status = "FAILED"            // stopped on an error it cannot recover from
)

var statuses = []Status{
	StatusStarting, StatusRecovering, StatusWaitingForEvent, StatusThinking,
	StatusRunningTool, StatusStopping, StatusStopped, StatusFailed,
}

// transitions lists, for each status, the statuses it may move to.
var transitions = map[Status][]Status{
	StatusStarting:        {StatusRecovering, StatusWaitingForEvent, StatusFailed, StatusStopping},
	StatusRecovering:      {StatusWaitingForEvent, StatusFailed, StatusStopping},
	StatusWaitingForEvent: {StatusThinking, StatusStopping, StatusFailed},
	StatusThinking:        {StatusRunningTool, StatusWaitingForEvent, StatusThinking, StatusStopping, StatusFailed},
	StatusRunningTool:     {StatusThinking, StatusWaitingForEvent, StatusStopping, StatusFailed},
	StatusStopping:        {StatusStopped, StatusFailed},
	StatusStopped:         {StatusStarting},
	StatusFailed:          {StatusStarting},
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// Clean reports whether a snapshot saved with status s was closed cleanly.
func (s Status) Clean() bool { return s == StatusStopped }

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to Status) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Transition moves s to the status to, or returns an error naming the
// illegal move and leaves s unchanged. Hydration is the one move allowed from
// anywhere: a crashed process leaves whatever status it had, and the next
// process starts over from StatusStarting.
func (s *Snapshot) Transition(to Status) error {
	if to == StatusStarting || CanTransition(s.Status, to) {
		s.Status = to
		return nil
	}
	return fmt.Errorf("agent %s: illegal status transition %s → %s", s.AgentID, s.Status, to)
}
