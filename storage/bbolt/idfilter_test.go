package bbolt

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func TestIDFilter(t *testing.T) {
	f := newIDFilter(0)
	for i := range 1000 {
		f.add(fmt.Sprintf("task-%d", i))
	}
	for i := range 1000 {
		if !f.mayHave(fmt.Sprintf("task-%d", i)) {
			t.Fatalf("task-%d added and not found", i)
		}
	}
	if f.full() {
		t.Fatal("full at 1000 ids of 1024")
	}
	fp := 0
	for i := range 10000 {
		if f.mayHave(fmt.Sprintf("other-%d", i)) {
			fp++
		}
	}
	if fp > 300 {
		t.Fatalf("%d false positives in 10000 (ten bits an id: about 1%%)", fp)
	}
	t.Logf("%d false positives in 10000", fp)
}

// resultsSaver saves snapshots of agent id whose outbox holds n new
// results each, task ids task-0, task-1, ...
type resultsSaver struct {
	snap *agent.Snapshot
	next uint64
}

func newResultsSaver(id string) *resultsSaver {
	s := agent.New(id, 1_700_000_000_000)
	s.Status = agent.StatusWaitingForEvent
	return &resultsSaver{snap: s}
}

func (r *resultsSaver) step(n int) *agent.Snapshot {
	s := r.snap
	s.TickIndex++
	s.Timestamp += 10
	s.Outbox = nil
	for range n {
		r.next++
		s.Outbox = append(s.Outbox, agent.Result{Seq: r.next, TaskID: fmt.Sprintf("task-%d", r.next-1), AgentID: s.AgentID,
			Status: agent.ResultDone, TickIndex: s.TickIndex, FinishedAt: s.Timestamp})
	}
	s.NextResultSeq = r.next + 1
	return s
}

// TestTaskResultWithoutTheLock: a task the index does not hold is answered
// while another operation holds the agent (a Save waiting for the disk);
// one it holds waits for it, as before.
func TestTaskResultWithoutTheLock(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	r := newResultsSaver("lk")
	mustSave(t, s, r.step(10))
	a, err := s.agents.Get("lk")
	if err != nil || a == nil {
		t.Fatal(err)
	}

	a.mu.Lock() // as a Save does until its sync has returned
	unknown := make(chan error, 1)
	go func() { _, err := s.TaskResult(ctx, "lk", "never-submitted"); unknown <- err }()
	select {
	case err := <-unknown:
		if !errors.Is(err, plugin.ErrNotFound) {
			a.mu.Unlock()
			t.Fatalf("unknown task: %v, want ErrNotFound", err)
		}
	case <-time.After(10 * time.Second):
		a.mu.Unlock()
		t.Fatal("TaskResult of a task the index does not hold waits for the agent's lock")
	}
	known := make(chan error, 1)
	go func() { _, err := s.TaskResult(ctx, "lk", "task-3"); known <- err }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-known:
		a.mu.Unlock()
		t.Fatalf("a task the index holds was answered without the lock: %v", err)
	default:
	}
	a.mu.Unlock()
	if err := <-known; err != nil {
		t.Fatalf("task-3: %v", err)
	}
}

// TestIDFilterHoldsTheIndex: every id the index holds is found, through a
// filter grown past its first size, after a reopen, after the journal's
// replay (a copy of the files of a store still open, as a crash leaves
// them), and not after the agent is deleted.
func TestIDFilterHoldsTheIndex(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	r := newResultsSaver("grow")
	for range 30 {
		mustSave(t, s, r.step(100)) // 3000 ids: the filter of 1024 is built again, twice
	}
	check := func(s *Store, what string, total int) {
		t.Helper()
		for i := range total {
			if _, err := s.TaskResult(ctx, "grow", fmt.Sprintf("task-%d", i)); err != nil {
				t.Fatalf("%s: task-%d: %v", what, i, err)
			}
		}
		if _, err := s.TaskResult(ctx, "grow", "task-x"); !errors.Is(err, plugin.ErrNotFound) {
			t.Fatalf("%s: task-x: %v, want ErrNotFound", what, err)
		}
	}
	check(s, "grown", 3000)
	if a, _ := s.agents.Get("grow"); a.ids.Load().cap < 3000 {
		t.Fatalf("the filter was not built again: sized for %d ids", a.ids.Load().cap)
	}

	// A few Saves in the journal only, then the files copied while open.
	for range 3 {
		mustSave(t, s, r.step(5))
	}
	check(mustOpen(t, copyAgent(t, dir, "grow", nil), Options{}), "replayed", 3015)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := mustOpen(t, dir, Options{})
	check(s2, "reopened", 3015)
	if err := s2.Delete(ctx, "grow"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.TaskResult(ctx, "grow", "task-1"); !errors.Is(err, plugin.ErrNotFound) {
		t.Fatalf("after Delete: %v, want ErrNotFound", err)
	}
}
