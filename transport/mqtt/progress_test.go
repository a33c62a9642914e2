package mqtt

import (
	"slices"
	"testing"
)

// Progress reports that pile up before the publisher takes them are
// published in order, a task's later report replacing its earlier one
// still waiting; another task's report is never dropped for it.
func TestProgressCoalesced(t *testing.T) {
	c, err := New(Config{Broker: "tcp://127.0.0.1:1", Device: "d1", Agent: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cancel()
	for _, p := range []progressMsg{
		{"t1", 0, "thinking"}, {"t1", 100, "done"},
		{"t2", 0, "thinking"}, {"t2", 0, "tool:sleep_ms"},
		{"t3", 0, "thinking"},
	} {
		c.Progress(p.TaskID, p.Percent, p.Phase)
	}
	first := <-c.progress
	got := c.pendingProgress([]progressMsg{first})
	want := []progressMsg{{"t1", 100, "done"}, {"t2", 0, "tool:sleep_ms"}, {"t3", 0, "thinking"}}
	if !slices.Equal(got, want) {
		t.Fatalf("published %+v, want %+v", got, want)
	}
	if got := c.pendingProgress(nil); len(got) != 0 {
		t.Fatalf("nothing waits, got %+v", got)
	}
}
