package agent_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestSubmitAsync: every task submitted without waiting is answered once,
// in the order submitted, and only when a save holding it has returned; a
// burst shares saves (group commit); after Stop the answer is ErrStopped.
func TestSubmitAsync(t *testing.T) {
	e := newEnv(t)
	e.store.delay = 2 * time.Millisecond
	rt := e.start()

	const n = 200
	var mu sync.Mutex
	var order []string
	answered := make(chan struct{}, n)
	before := e.store.saves
	for i := range n {
		id := fmt.Sprintf("t%03d", i)
		ev, err := agent.TaskEvent(&agent.Task{TaskID: id, Input: []byte(`"x"`)}, "test", time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		rt.SubmitAsync(context.Background(), ev, func(res agent.SubmitResult) {
			if res.Err != nil || res.Duplicate {
				t.Errorf("task %s: %+v", id, res)
			}
			// Durable: the last save holds the task, queued, running or done.
			e.store.mu.Lock()
			b := e.store.data["a1"]
			e.store.mu.Unlock()
			s, err := agent.Decode(b)
			if err != nil {
				t.Error(err)
			} else if !holds(s, id) {
				t.Errorf("task %s answered before a save held it", id)
			}
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			answered <- struct{}{}
		})
	}
	for range n {
		select {
		case <-answered:
		case <-time.After(30 * time.Second):
			t.Fatal("not every task was answered")
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("tasks answered out of order: %v", order)
	}
	e.store.mu.Lock()
	saves := e.store.saves - before
	e.store.mu.Unlock()
	if saves >= n/2 {
		t.Errorf("%d tasks submitted at once took %d saves; group commit should need far fewer", n, saves)
	}

	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan agent.SubmitResult, 1)
	rt.SubmitAsync(context.Background(), agent.Event{Type: "task", ID: "late", Payload: []byte(`{"task_id":"late"}`)},
		func(res agent.SubmitResult) { got <- res })
	select {
	case res := <-got:
		if !errors.Is(res.Err, agent.ErrStopped) {
			t.Fatalf("SubmitAsync after Stop = %+v, want ErrStopped", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SubmitAsync after Stop was never answered")
	}
}

// holds reports whether the snapshot has task id queued, in its history or
// in its outbox.
func holds(s *agent.Snapshot, id string) bool {
	for _, ev := range s.EventQueueBackup {
		if ev.ID == id {
			return true
		}
	}
	for _, r := range s.Outbox {
		if r.TaskID == id {
			return true
		}
	}
	for _, m := range s.Memory.ShortTermHistory {
		if m.TaskID == id {
			return true
		}
	}
	return slices.Contains(s.RecentEventIDs, id)
}

// TestConfirmRidesOnTheNextSave: Confirm neither blocks nor causes a save;
// the confirmed result leaves the outbox at the next save, and Snapshot
// shows it gone.
func TestConfirmRidesOnTheNextSave(t *testing.T) {
	e := newEnv(t)
	out := &recordingOutbox{}
	e.cfg.Outbox = out
	rt := e.start()
	if res := submit(t, rt, "t1", "x"); res.Err != nil {
		t.Fatal(res.Err)
	}
	waitTask(t, rt, "t1")
	var seq uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if rs := out.get(); len(rs) > 0 {
			seq = rs[0].Seq
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no result delivered")
		}
	}
	e.store.mu.Lock()
	saves := e.store.saves
	e.store.mu.Unlock()
	rt.Confirm(seq)
	s, err := rt.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Outbox) != 0 {
		t.Fatalf("outbox after Confirm = %+v, want empty", s.Outbox)
	}
	e.store.mu.Lock()
	if e.store.saves != saves {
		t.Errorf("Confirm caused %d saves", e.store.saves-saves)
	}
	e.store.mu.Unlock()
	if res := submit(t, rt, "t2", "x"); res.Err != nil {
		t.Fatal(res.Err)
	}
	if st := e.store.stored(t, "a1"); slices.ContainsFunc(st.Outbox, func(r agent.Result) bool { return r.Seq == seq }) {
		t.Fatalf("confirmed result %d still in the saved outbox", seq)
	}
}

type recordingOutbox struct {
	mu      sync.Mutex
	results []agent.Result
}

func (o *recordingOutbox) Deliver(rs []agent.Result) {
	o.mu.Lock()
	o.results = append(o.results, rs...)
	o.mu.Unlock()
}

func (o *recordingOutbox) get() []agent.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.results)
}

// BusySave: saves of tasks that come one at a time are not busy; once a
// save made several durable at once, the saves are busy until eight in a
// row made at most one durable.
func TestBusySave(t *testing.T) {
	e := newEnv(t)
	rt := e.start()
	submit := func(prefix string, n int, together bool) {
		t.Helper()
		answered := make(chan agent.SubmitResult, n)
		for i := range n {
			ev, err := agent.TaskEvent(&agent.Task{TaskID: fmt.Sprintf("%s%03d", prefix, i), Input: []byte(`"x"`)}, "test", time.Now().UnixMilli())
			if err != nil {
				t.Fatal(err)
			}
			rt.SubmitAsync(context.Background(), ev, func(res agent.SubmitResult) { answered <- res })
			if !together {
				if res := <-answered; res.Err != nil {
					t.Fatal(res.Err)
				}
			}
		}
		if together {
			for range n {
				if res := <-answered; res.Err != nil {
					t.Fatal(res.Err)
				}
			}
		}
		// The task's own tick and its save: wait until it is done.
		wait.For(t, 10*time.Second, "the tasks to finish", func() bool {
			st, ok, err := rt.TaskState(context.Background(), fmt.Sprintf("%s%03d", prefix, n-1))
			return err == nil && ok && st.Status == agent.ResultDone
		})
	}
	busy := func() []bool {
		e.store.mu.Lock()
		defer e.store.mu.Unlock()
		return append([]bool(nil), e.store.busy...)
	}
	submit("one", 3, false)
	if b := busy(); slices.Contains(b, true) {
		t.Fatalf("tasks one at a time: saves busy %v", b)
	}
	e.store.mu.Lock()
	e.store.delay = 5 * time.Millisecond // the burst gathers behind a save
	e.store.mu.Unlock()
	n := len(busy())
	submit("burst", 40, true)
	if b := busy()[n:]; !slices.Contains(b, true) {
		t.Fatalf("a burst of 40: no busy save in %v", b)
	}
	e.store.mu.Lock()
	e.store.delay = 0
	e.store.mu.Unlock()
	submit("after", 12, false)
	if b := busy(); b[len(b)-1] {
		t.Fatalf("twelve tasks one at a time after the burst: the last save is still busy (%v)", b)
	}
}

// With one processor (as the daemon runs agents) and eight clients that
// each send their next task once the last is durable, one save makes the
// tasks of several clients durable: the runtime's goroutine, woken by the
// first sender, lets the others send before it saves. Before it did, each
// save took one task (the woken goroutine runs before the other runnable
// ones), 800 saves for 800 tasks.
func TestGroupCommitOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := newEnv(t)
	rt := e.start()
	const clients, each = 8, 100
	before := func() int { e.store.mu.Lock(); defer e.store.mu.Unlock(); return e.store.saves }()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ev, err := agent.TaskEvent(&agent.Task{TaskID: fmt.Sprintf("c%d-%03d", c, i), Input: []byte(`"x"`)}, "test", time.Now().UnixMilli())
				if err != nil {
					t.Error(err)
					return
				}
				if res := rt.Submit(context.Background(), ev); res.Err != nil {
					t.Error(res.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	e.store.mu.Lock()
	saves := e.store.saves - before
	e.store.mu.Unlock()
	t.Logf("%d tasks of %d clients made durable by %d saves", clients*each, clients, saves)
	if saves > clients*each/2 {
		t.Fatalf("%d saves for %d tasks of %d clients: the saves do not gather the clients' tasks", saves, clients*each, clients)
	}
}
