package agent_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// outboxHas reports whether the runtime's outbox holds a result of task id.
func outboxHas(t *testing.T, rt *agent.Runtime, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := rt.Snapshot(ctx)
	if err != nil {
		t.Fatalf("the runtime answers nothing while a save waits: %v", err)
	}
	for _, res := range s.Outbox {
		if res.TaskID == id {
			return true
		}
	}
	return false
}

// TestQuickTicksRunBesideTheSaveAfterQuickWait: once QuickWait has run out
// while a save is in flight, a quick task taken meanwhile still runs its
// tick beside that save (the next save cannot start before it lands
// anyway), so that the next save holds its result rather than the task as
// a queued event. Before, ticks stopped until the save had landed: in a
// burst the next save held the whole burst queued, and their results came
// a save later (BenchmarkMQTTIngress, docs/figures.md).
func TestQuickTicksRunBesideTheSaveAfterQuickWait(t *testing.T) {
	e := newEnv(t)
	e.cfg.QuickWait = time.Millisecond
	f := startInFlight(t, e)
	f.submit("b")
	wait.For(t, 10*time.Second, "task b's tick to run during a's save", func() bool { return outboxHas(t, f.rt, "b") })
	// b's tick began a wait of QuickWait for the next save: let it run out.
	time.Sleep(20 * e.cfg.QuickWait)
	f.submit("c")
	wait.For(t, 10*time.Second, "task c's tick to run during a's save, after QuickWait ran out", func() bool {
		return outboxHas(t, f.rt, "c")
	})
	f.noneAnswered()
	f.land("a", "b", "c")
}

// TestLandingAnswersBetweenTicks: quick ticks that run beside a save do not
// hold back that save's answers: once it lands, its events are answered
// before the next queued tick starts, not after the queue's last.
func TestLandingAnswersBetweenTicks(t *testing.T) {
	e := newEnv(t)
	var ticks atomic.Int64
	e.cfg.Brain = sleepyBrain{Brain: e.cfg.Brain, d: 5 * time.Millisecond, ticks: &ticks}
	e.cfg.QuickWait = time.Millisecond
	g := &gateStore{jsonStore: e.store, entered: make(chan struct{}, 4)}
	e.cfg.Store = g
	rt := e.start()
	t.Cleanup(g.open)
	burst(t, rt, "warm", 16)

	g.shut()
	var atAnswer atomic.Int64 // ticks begun when task a was answered
	aDone := make(chan agent.SubmitResult, 1)
	rt.SubmitAsync(context.Background(), taskEvent(t, "a"), func(res agent.SubmitResult) {
		atAnswer.Store(ticks.Load())
		aDone <- res
	})
	<-g.entered
	before := ticks.Load()
	const queued = 20 // 100 ms of ticks
	others := make(chan agent.SubmitResult, queued)
	for i := range queued {
		rt.SubmitAsync(context.Background(), taskEvent(t, fmt.Sprintf("q%02d", i)),
			func(res agent.SubmitResult) { others <- res })
	}
	wait.For(t, 10*time.Second, "the queued ticks to begin beside a's save", func() bool { return ticks.Load() > before+1 })
	g.open()
	if res := <-aDone; res.Err != nil {
		t.Fatal(res.Err)
	}
	for range queued {
		if res := <-others; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// At most the tick running when the save landed, and the one after if
	// the landing came just as it ended, began before a was answered.
	if got := atAnswer.Load() - before; got > 4 {
		t.Fatalf("task a was answered after %d of the %d queued ticks had begun: its landing waited for the queue", got, queued)
	}
}

// floodStore is a store whose Saves take a while and keep nothing, and
// which counts them.
type floodStore struct {
	*jsonStore
	delay time.Duration
	saves atomic.Int64
}

func (f *floodStore) Save(ctx context.Context, s *agent.Snapshot) error {
	time.Sleep(f.delay)
	f.saves.Add(1)
	return nil
}

// TestFloodDoesNotHoldTheSave: while senders keep the runtime's channel
// full (a broker forwarding a burst), saves go on one after another: the
// runtime takes a bounded batch of what waits, then ticks and saves. Before,
// it took whatever waited until the channel was empty, and a save that
// landed during a burst was followed by the next only when the burst ended.
func TestFloodDoesNotHoldTheSave(t *testing.T) {
	e := newEnv(t)
	fs := &floodStore{jsonStore: e.store, delay: 2 * time.Millisecond}
	e.cfg.Store = fs
	e.cfg.MaxQueue = 1 << 20
	rt := e.start()

	const senders, each = 4, 8000
	evs := make([][]agent.Event, senders)
	for s := range senders {
		for i := range each {
			evs[s] = append(evs[s], taskEvent(t, fmt.Sprintf("f%d-%05d", s, i)))
		}
	}
	var answered sync.WaitGroup
	answered.Add(senders * each)
	var failed atomic.Int64
	var sent sync.WaitGroup
	start := fs.saves.Load()
	t0 := time.Now()
	for s := range senders {
		sent.Add(1)
		go func() {
			defer sent.Done()
			for _, ev := range evs[s] {
				rt.SubmitAsync(context.Background(), ev, func(res agent.SubmitResult) {
					if res.Err != nil {
						failed.Add(1)
					}
					answered.Done()
				})
			}
		}()
	}
	sent.Wait() // every event is in the runtime's channel or taken
	during, took := fs.saves.Load()-start, time.Since(t0)
	answered.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d events refused", n)
	}
	// 32,000 events take the runtime tens of milliseconds at least, even
	// without their ticks: time for several 2 ms saves.
	if during < 3 {
		t.Fatalf("%d saves in the %v the senders kept the channel full, want at least 3: the save waited for the flood to end",
			during, took.Round(time.Millisecond))
	}
	t.Logf("%d saves in the %v of the flood", during, took.Round(time.Millisecond))
}
