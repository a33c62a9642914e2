package mqtt

import (
	"slices"
	"testing"
)

// Progress reports that pile up before the publisher takes them are
// published in order, a task's later report replacing its earlier one
// still waiting (a "done" replaces only a plain "thinking": the last token
// count is published before it); another task's report is never dropped
// for it.
func TestProgressCoalesced(t *testing.T) {
	c, err := New(Config{Broker: "tcp://127.0.0.1:1", Device: "d1", Agent: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cancel()
	for _, p := range []progressMsg{
		{"t1", 0, "thinking"}, {"t1", 100, "done"},
		{"t2", 0, "thinking"}, {"t2", 0, "tool:sleep_ms"},
		{"t3", 0, "thinking"}, {"t3", 0, "thinking: 5 tokens"}, {"t3", 0, "thinking: 9 tokens"}, {"t3", 100, "done"},
		{"t4", 100, "done"},
	} {
		c.Progress(p.TaskID, p.Percent, p.Phase)
	}
	got := pendingProgress(nil, c.reports)
	want := []progressMsg{{"t1", 100, "done"}, {"t2", 0, "tool:sleep_ms"},
		{"t3", 0, "thinking: 9 tokens"}, {"t3", 100, "done"}, {"t4", 100, "done"}}
	if !slices.Equal(got, want) {
		t.Fatalf("published %+v, want %+v", got, want)
	}
	if got := pendingProgress(nil, nil); len(got) != 0 {
		t.Fatalf("nothing waits, got %+v", got)
	}
}

// A "done" report does not wake the publisher (it waits for its result);
// any other report does, and the reports waiting are bounded.
func TestProgressDoneWaitsForResult(t *testing.T) {
	c, err := New(Config{Broker: "tcp://127.0.0.1:1", Device: "d1", Agent: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cancel()
	c.Progress("t1", 100, "done")
	select {
	case <-c.wake:
		t.Fatal(`a "done" report woke the publisher`)
	default:
	}
	c.Progress("t2", 0, "thinking")
	select {
	case <-c.wake:
	default:
		t.Fatal(`a "thinking" report did not wake the publisher`)
	}
	// Only a batch of "done" reports waits: another task's report in it
	// is published at once, and the "done" reports with it.
	if !allDone([]progressMsg{{"t1", 100, "done"}, {"t4", 100, "done"}}) ||
		allDone([]progressMsg{{"t1", 100, "done"}, {"t2", 0, "thinking"}}) {
		t.Error("allDone")
	}
	for i := range 2 * maxReports {
		c.Progress("t3", i, "thinking")
	}
	if n := len(c.reports); n != maxReports {
		t.Fatalf("%d reports waiting, want at most %d", n, maxReports)
	}
}
