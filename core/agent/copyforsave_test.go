package agent

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopyForSave: a copy taken for a save in flight is not reached by any
// change the runtime makes to its state afterwards: accepting, finishing
// (the history over its budget, the recent ids over their bound),
// confirming results at the front and in the middle of the outbox,
// intending an action, a session's variables. A change that wrote a list's
// element in place would show here (and to the race detector in
// TestSaveOverlapsTheNextTicks).
func TestCopyForSave(t *testing.T) {
	st := testState(limits{maxMessages: 3, recentIDs: 4, maxQueue: 100})
	msgs := func(id string) []Message {
		return []Message{{Role: "user", Content: "in " + id, TaskID: id}, {Role: "assistant", Content: "out " + id, TaskID: id}}
	}
	finish := func(id string) {
		st.finish(&outcome{ev: taskEv(id), result: Result{TaskID: id, Status: ResultDone, Output: []byte(`"x"`)},
			messages: msgs(id), sessionID: "s1", projectID: "p1", vars: map[string]any{"k": id}}, 1)
	}
	for i := range 6 {
		if err := st.accept(taskEv(fmt.Sprintf("t%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	finish("t0")
	finish("t1")
	finish("t2")
	st.intend(&TurnLog{EventID: "t3"}, &PendingAction{EventID: "t3", TaskID: "t3", Tool: "file_append",
		Completed: []ToolResult{{CallID: "c1", Tool: "sleep_ms"}}})

	c := st.copyForSave()
	before, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	liveBefore, _ := Encode(st.snap)

	out := st.snap.Outbox
	st.confirm(out[1].Seq) // in the middle of what the copy holds
	st.intend(&TurnLog{EventID: "t3", Steps: []TurnStep{{}}}, nil)
	for i := 6; i < 12; i++ {
		if err := st.accept(taskEv(fmt.Sprintf("t%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < 9; i++ {
		finish(fmt.Sprintf("t%d", i))
	}
	out = st.snap.Outbox
	st.confirm(out[0].Seq)
	st.confirm(out[3].Seq)
	st.snap.Memory.WorkingVariables["added"] = "later"

	after, _ := Encode(c)
	if !bytes.Equal(before, after) {
		t.Fatalf("the copy changed with the state:\nbefore %s\nafter  %s", before, after)
	}
	if live, _ := Encode(st.snap); bytes.Equal(live, liveBefore) {
		t.Fatal("the state did not change: the test changes nothing")
	}
}
