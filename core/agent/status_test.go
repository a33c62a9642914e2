package agent

import "testing"

func TestTransitions(t *testing.T) {
	legal := map[[2]Status]bool{}
	for from, tos := range transitions {
		for _, to := range tos {
			legal[[2]Status{from, to}] = true
		}
	}
	cases := []struct {
		from, to Status
		ok       bool
	}{
		{StatusStarting, StatusWaitingForEvent, true},
		{StatusStarting, StatusRecovering, true},
		{StatusRecovering, StatusWaitingForEvent, true},
		{StatusWaitingForEvent, StatusThinking, true},
		{StatusThinking, StatusRunningTool, true},
		{StatusRunningTool, StatusThinking, true},
		{StatusRunningTool, StatusWaitingForEvent, true},
		{StatusThinking, StatusWaitingForEvent, true},
		{StatusWaitingForEvent, StatusStopping, true},
		{StatusStopping, StatusStopped, true},
		{StatusStopped, StatusStarting, true},
		{StatusFailed, StatusStarting, true},
		{StatusWaitingForEvent, StatusRunningTool, false},
		{StatusStopped, StatusThinking, false},
		{StatusStopped, StatusWaitingForEvent, false},
		{StatusStarting, StatusThinking, false},
		{StatusRecovering, StatusThinking, false},
		{StatusStopping, StatusThinking, false},
		{StatusWaitingForEvent, StatusStopped, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.from)+"→"+string(tc.to), func(t *testing.T) {
			if got := CanTransition(tc.from, tc.to); got != tc.ok {
				t.Fatalf("CanTransition = %v, want %v", got, tc.ok)
			}
			if legal[[2]Status{tc.from, tc.to}] != tc.ok {
				t.Fatal("table and CanTransition disagree")
			}
			s := &Snapshot{AgentID: "a", Status: tc.from}
			err := s.Transition(tc.to)
			if (err == nil) != tc.ok {
				t.Fatalf("Transition error = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && s.Status != tc.from {
				t.Fatal("a refused transition changed the status")
			}
		})
	}
}

// A crashed process leaves any status behind; the next one always starts.
func TestHydrationStartsFromAnyStatus(t *testing.T) {
	for _, st := range statuses {
		s := &Snapshot{AgentID: "a", Status: st}
		if err := s.Transition(StatusStarting); err != nil {
			t.Errorf("%s → STARTING: %v", st, err)
		}
	}
}

func TestEveryStatusHasAnExit(t *testing.T) {
	for _, st := range statuses {
		if len(transitions[st]) == 0 {
			t.Errorf("status %s has no transition out", st)
		}
		if !st.Valid() {
			t.Errorf("status %s not valid", st)
		}
	}
	if Status("NOPE").Valid() {
		t.Error("unknown status valid")
	}
}
