package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// goid is the calling goroutine's number, from its stack's first line.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// whereBrain is a quick brain that notes the goroutine of every question.
type whereBrain struct {
	agent.Brain
	mu  *sync.Mutex
	ids *[]uint64
}

func (b whereBrain) Quick() bool { return true }

func (b whereBrain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	b.mu.Lock()
	*b.ids = append(*b.ids, goid())
	b.mu.Unlock()
	return b.Brain.Think(ctx, turn)
}

// A quick brain's tick that calls no tool runs on the runtime's goroutine,
// the one that saves (no goroutine started for it and no hand-off of its
// outcome: two wake-ups per task); one that calls a tool runs on a goroutine
// of its own, the brain asked again there from the start. Either way each
// step is reported once, in order, and the task is saved once.
func TestQuickTickOnRuntimeGoroutine(t *testing.T) {
	sleep := map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": 0}}}}
	cases := []struct {
		name     string
		input    any
		onLoop   bool     // every question asked on the saving goroutine
		asked    int      // questions to the brain
		progress []string // what OnProgress was told
	}{
		{"answer", "hello", true, 1, []string{"0 thinking", "100 done"}},
		{"idempotent tool", sleep, false, 3, []string{"0 thinking", "0 tool:sleep_ms", "11 thinking", "100 done"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var mu sync.Mutex
			var asked, saved []uint64
			var progress []string
			e.cfg.Brain = whereBrain{Brain: e.cfg.Brain, mu: &mu, ids: &asked}
			e.cfg.AfterSave = func(*agent.Snapshot) { mu.Lock(); saved = append(saved, goid()); mu.Unlock() }
			e.cfg.OnProgress = func(_ string, pct int, phase string) {
				mu.Lock()
				progress = append(progress, fmt.Sprintf("%d %s", pct, phase))
				mu.Unlock()
			}
			rt := e.start()
			if res := submit(t, rt, "t1", tc.input); res.Err != nil {
				t.Fatalf("submit: %+v", res)
			}
			if st := waitTask(t, rt, "t1"); st.Status != agent.ResultDone {
				t.Fatalf("state = %+v", st)
			}
			if _, err := rt.Snapshot(context.Background()); err != nil { // after the loop's last save
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(saved) != 2 { // hydration, then the task in one save
				t.Fatalf("%d saves, want 2", len(saved))
			}
			loop := saved[len(saved)-1]
			if len(asked) != tc.asked {
				t.Fatalf("the brain was asked %d times, want %d", len(asked), tc.asked)
			}
			if on := !slices.ContainsFunc(asked, func(id uint64) bool { return id != loop }); on != tc.onLoop {
				t.Fatalf("asked on goroutines %v, the runtime's is %d: on the runtime's = %v, want %v", asked, loop, on, tc.onLoop)
			}
			if !slices.Equal(progress, tc.progress) {
				t.Fatalf("progress %q, want %q", progress, tc.progress)
			}
		})
	}
}

// sleepyBrain is a quick brain that takes its time over every answer, and
// counts the answers it began in ticks when set.
type sleepyBrain struct {
	agent.Brain
	d     time.Duration
	ticks *atomic.Int64
}

func (b sleepyBrain) Quick() bool { return true }

func (b sleepyBrain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	if b.ticks != nil {
		b.ticks.Add(1)
	}
	time.Sleep(b.d)
	return b.Brain.Think(ctx, turn)
}

// Queued quick ticks run one after another on the runtime's goroutine only
// until QuickWait runs out: then what ran is saved and acknowledged before
// the next starts, so a long queue does not hold its first task's answer
// back by more than QuickWait and a tick.
func TestQuickTicksInARowStopAtQuickWait(t *testing.T) {
	e := newEnv(t)
	e.cfg.Brain = sleepyBrain{Brain: e.cfg.Brain, d: 5 * time.Millisecond}
	e.cfg.QuickWait = time.Millisecond
	gate, held := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var ticks []uint64 // TickIndex of every save
	e.cfg.AfterSave = func(s *agent.Snapshot) {
		mu.Lock()
		ticks = append(ticks, s.TickIndex)
		n := len(ticks)
		mu.Unlock()
		if n == 2 { // the save of the first task: hold the runtime while ten queue up
			close(held)
			<-gate
		}
	}
	rt := e.start()
	done := make(chan agent.SubmitResult, 11)
	submitAsync := func(id string) {
		ev, err := agent.TaskEvent(&agent.Task{TaskID: id, Input: []byte(`"x"`)}, "test", time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		rt.SubmitAsync(context.Background(), ev, func(res agent.SubmitResult) { done <- res })
	}
	submitAsync("first")
	<-held
	for i := range 10 {
		submitAsync(fmt.Sprintf("t%d", i))
	}
	close(gate)
	for range 11 {
		if res := <-done; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	for i := range 10 {
		if st := waitTask(t, rt, fmt.Sprintf("t%d", i)); st.Status != agent.ResultDone {
			t.Fatalf("t%d = %+v", i, st)
		}
	}
	if _, err := rt.Snapshot(context.Background()); err != nil { // after the loop's last save
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// ticks[1] is the first task's save; each later save holds the ticks
	// that ran since. Ten 5 ms ticks against a 1 ms QuickWait: no save may
	// hold more than one tick.
	for i := 2; i < len(ticks); i++ {
		if n := ticks[i] - ticks[i-1]; n > 1 {
			t.Fatalf("a save held %d ticks run in a row (saves at ticks %v); QuickWait should have ended the run after one", n, ticks)
		}
	}
	if ticks[len(ticks)-1] != 11 {
		t.Fatalf("saves at ticks %v, want the last at 11", ticks)
	}
}
