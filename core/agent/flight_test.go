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
	f := startInFlight(t, e)
	f.submit("b")

	// The runtime goes on: it takes b and runs its tick meanwhile.
	wait.For(t, 10*time.Second, "task b's tick to run during a's save", func() bool { return outboxHas(t, f.rt, "b") })
	f.noneAnswered()
	// Nor is b reported before a save holds it.
	if st, ok, err := f.rt.TaskState(context.Background(), "b"); err != nil || ok {
		t.Fatalf("task b reported as %+v (%v) before a save holds it", st, err)
	}

	f.land("a", "b")
	if err := f.rt.Stop(context.Background()); err != nil {
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

// inFlight is a runtime in a busy spell whose save of task a waits at its
// store's gate (startInFlight).
type inFlight struct {
	t        *testing.T
	rt       *agent.Runtime
	g        *gateStore
	answered chan string // the ids of the tasks answered, in order
}

// startInFlight starts e's runtime, brings it into a busy spell (a burst
// whose saves take 2 ms), shuts its store's gate and submits task a,
// returning once a's save waits at the gate.
func startInFlight(t *testing.T, e *env) *inFlight {
	t.Helper()
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
	f := &inFlight{t: t, rt: rt, g: g, answered: make(chan string, 16)}
	f.submit("a")
	select {
	case <-g.entered: // a's save waits for the disk
	case <-time.After(10 * time.Second):
		t.Fatal("no save of task a")
	}
	return f
}

// submit submits task id; its answer goes to answered.
func (f *inFlight) submit(id string) {
	f.rt.SubmitAsync(context.Background(), taskEvent(f.t, id), func(res agent.SubmitResult) {
		if res.Err != nil {
			f.t.Errorf("%s: %v", id, res.Err)
		}
		f.answered <- id
	})
}

// noneAnswered fails the test if a task was answered.
func (f *inFlight) noneAnswered() {
	f.t.Helper()
	select {
	case id := <-f.answered:
		f.t.Fatalf("task %s acknowledged while a's save waits for the disk", id)
	default:
	}
}

// land opens the gate and checks that the tasks ids are answered in that
// order and finish.
func (f *inFlight) land(ids ...string) {
	f.t.Helper()
	f.g.open()
	for _, want := range ids {
		select {
		case id := <-f.answered:
			if id != want {
				f.t.Fatalf("acknowledged %s, want %s first", id, want)
			}
		case <-time.After(10 * time.Second):
			f.t.Fatalf("task %s never acknowledged", want)
		}
	}
	for _, id := range ids {
		if st := waitTask(f.t, f.rt, id); st.Status != agent.ResultDone {
			f.t.Fatalf("%s: %+v", id, st)
		}
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
