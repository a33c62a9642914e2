package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// gateStore is a jsonStore whose Saves, while the gate is shut, wait for it
// to open (announcing themselves on entered first).
type gateStore struct {
	*jsonStore
	entered chan struct{}
	mu      sync.Mutex
	gate    chan struct{} // nil: open
}

func (g *gateStore) Save(ctx context.Context, s *agent.Snapshot) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		<-gate
	}
	return g.jsonStore.Save(ctx, s)
}

func (g *gateStore) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gateStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

// burst submits n tasks together and waits until every one is answered and
// the last is done: a busy spell (agent.BusySave) begins.
func burst(t *testing.T, rt *agent.Runtime, prefix string, n int) {
	t.Helper()
	answered := make(chan agent.SubmitResult, n)
	for i := range n {
		rt.SubmitAsync(context.Background(), taskEvent(t, fmt.Sprintf("%s%03d", prefix, i)),
			func(res agent.SubmitResult) { answered <- res })
	}
	for range n {
		if res := <-answered; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	last := fmt.Sprintf("%s%03d", prefix, n-1)
	wait.For(t, 10*time.Second, last+" to finish", func() bool {
		st, ok, err := rt.TaskState(context.Background(), last)
		return err == nil && ok && st.Status == agent.ResultDone
	})
}

func taskEvent(t *testing.T, id string) agent.Event {
	t.Helper()
	ev, err := agent.TaskEvent(&agent.Task{TaskID: id, Input: []byte(`"x"`)}, "test", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestSaveOverlapsTheNextTicks: in a busy spell, while a save waits for the
// disk, the runtime accepts the next task and runs its tick; neither task is
// acknowledged before a save holding it has returned. Before, the runtime's
// goroutine waited in the save and answered nothing meanwhile (Snapshot
// timed out here).
func TestSaveOverlapsTheNextTicks(t *testing.T) {
	e := newEnv(t)
	g := &gateStore{jsonStore: e.store, entered: make(chan struct{}, 4)}
	e.cfg.Store = g
	e.store.delay = 2 * time.Millisecond // the burst gathers behind a save
	rt := e.start()
	t.Cleanup(g.open) // before Stop, when the test fails with the gate shut
	burst(t, rt, "warm", 16)
	e.store.mu.Lock()
	e.store.delay = 0
	e.store.mu.Unlock()

	g.shut()
	answered := make(chan string, 2)
	answer := func(id string) func(agent.SubmitResult) {
		return func(res agent.SubmitResult) {
			if res.Err != nil {
				t.Errorf("%s: %v", id, res.Err)
			}
			answered <- id
		}
	}
	rt.SubmitAsync(context.Background(), taskEvent(t, "a"), answer("a"))
	select {
	case <-g.entered: // a's save waits for the disk
	case <-time.After(10 * time.Second):
		t.Fatal("no save of task a")
	}
	rt.SubmitAsync(context.Background(), taskEvent(t, "b"), answer("b"))

	// The runtime goes on: it takes b and runs its tick meanwhile.
	var s *agent.Snapshot
	wait.For(t, 10*time.Second, "task b's tick to run during a's save", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if s, err = rt.Snapshot(ctx); err != nil {
			t.Fatalf("the runtime answers nothing while a save waits: %v", err)
		}
		for _, res := range s.Outbox {
			if res.TaskID == "b" {
				return true
			}
		}
		return false
	})
	select {
	case id := <-answered:
		t.Fatalf("task %s acknowledged while its save waits for the disk", id)
	default:
	}
	// Nor is b reported before a save holds it.
	if st, ok, err := rt.TaskState(context.Background(), "b"); err != nil || ok {
		t.Fatalf("task b reported as %+v (%v) before a save holds it", st, err)
	}

	g.open()
	for _, want := range []string{"a", "b"} {
		select {
		case id := <-answered:
			if id != want {
				t.Fatalf("acknowledged %s, want %s first", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("task %s never acknowledged", want)
		}
	}
	for _, id := range []string{"a", "b"} {
		if st := waitTask(t, rt, id); st.Status != agent.ResultDone {
			t.Fatalf("%s: %+v", id, st)
		}
	}
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored := e.store.stored(t, "a1")
	if stored.Status != agent.StatusStopped {
		t.Fatalf("stored status %s", stored.Status)
	}
	if n := stored.TickIndex; n != 18 {
		t.Fatalf("stored tick index %d, want 18 (16 + a + b)", n)
	}
}

// TestFailedSaveInFlight: a save that fails while the runtime goes on fails
// the runtime, and neither its tasks nor those taken meanwhile are
// acknowledged; the store keeps what it had.
func TestFailedSaveInFlight(t *testing.T) {
	e := newEnv(t)
	g := &gateStore{jsonStore: e.store, entered: make(chan struct{}, 4)}
	e.cfg.Store = g
	e.store.delay = 2 * time.Millisecond
	rt := e.start()
	t.Cleanup(g.open) // before Stop, when the test fails with the gate shut
	burst(t, rt, "warm", 16)
	before := e.store.stored(t, "a1").TickIndex

	g.shut()
	e.store.mu.Lock()
	e.store.fail = errors.New("disk full")
	e.store.mu.Unlock()
	answered := make(chan agent.SubmitResult, 2)
	rt.SubmitAsync(context.Background(), taskEvent(t, "a"), func(res agent.SubmitResult) { answered <- res })
	<-g.entered
	rt.SubmitAsync(context.Background(), taskEvent(t, "b"), func(res agent.SubmitResult) { answered <- res })
	wait.For(t, 10*time.Second, "task b to be taken", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := rt.Snapshot(ctx)
		if err != nil {
			t.Fatalf("the runtime answers nothing while a save waits: %v", err)
		}
		return s.TickIndex >= before+2
	})
	g.open()
	for range 2 {
		select {
		case res := <-answered:
			if res.Err == nil || !strings.Contains(res.Err.Error(), "disk full") {
				t.Fatalf("answer after a failed save: %+v", res)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a task was never answered after the failed save")
		}
	}
	select {
	case <-rt.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime goes on after a failed save")
	}
	if err := rt.Err(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("runtime error %v", err)
	}
	if got := e.store.stored(t, "a1").TickIndex; got != before {
		t.Fatalf("stored tick index %d, want %d: the store changed", got, before)
	}
}

// TestHoldForgetsIdleClients: a save waits for as many events as the last
// round acknowledged only while those clients may still be sending their
// next; once QuickWait has passed since, the next task is saved at once.
// Before, after any round of several tasks, the first task after an idle
// spell waited QuickWait out (at the start of every burst).
func TestHoldForgetsIdleClients(t *testing.T) {
	e := newEnv(t)
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	e.cfg.Tools = append(e.cfg.Tools, gateTool(entered, gate))
	const quickWait = 2 * time.Second
	e.cfg.QuickWait = quickWait
	rt := e.start()
	// A round of three clients, held together by a tick on the gate.
	answered := make(chan agent.SubmitResult, 3)
	go func() { answered <- submit(t, rt, "g", map[string]any{"call": []map[string]any{{"tool": "gate"}}}) }()
	<-entered
	for _, id := range []string{"a1", "a2"} {
		go func() { answered <- submit(t, rt, id, "x") }()
	}
	wait.For(t, 10*time.Second, "three tasks accepted", func() bool {
		s, err := rt.Snapshot(context.Background())
		return err == nil && len(s.RecentEventIDs) == 3
	})
	close(gate)
	for range 3 {
		if res := <-answered; res.Err != nil {
			t.Fatal(res.Err)
		}
	}

	time.Sleep(quickWait + quickWait/4) // the clients of that round send nothing more
	start := time.Now()
	if res := submit(t, rt, "late", "x"); res.Err != nil {
		t.Fatal(res.Err)
	}
	if took := time.Since(start); took > quickWait/2 {
		t.Fatalf("a task after an idle spell was acknowledged after %v: its save waited for the clients of the last round", took)
	}
}
