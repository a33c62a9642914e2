package host

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// countingScrubber stands for a store (the real ones are scrubbed through
// the binary in TestDaemonScrub); it counts the scrubs.
type countingScrubber struct {
	mu   sync.Mutex
	n    int
	rep  plugin.ScrubReport
	err  error
	done chan struct{}
}

func (c *countingScrubber) Scrub(context.Context, string) (plugin.ScrubReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.done != nil {
		c.done <- struct{}{}
	}
	return c.rep, c.err
}

// TestScrubDue: a scrub is due once an interval has passed since the last
// one and the agent has not saved for the idle time; a save pushes it back.
func TestScrubDue(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	s := &scrubber{interval: time.Hour, idle: 30 * time.Second, now: func() time.Time { return now }}
	s.lastSave.Store(t0.UnixNano())
	for _, tc := range []struct {
		name      string
		at        time.Duration // since t0
		lastSave  time.Duration // since t0
		lastScrub time.Duration // since t0
		due       bool
	}{
		{"before the interval", 30 * time.Minute, 0, 0, false},
		{"an interval, idle", time.Hour, 0, 0, true},
		{"an interval, a save 10 s ago", time.Hour, time.Hour - 10*time.Second, 0, false},
		{"an interval, the last save 30 s ago", time.Hour, time.Hour - 30*time.Second, 0, true},
		{"half an interval after the last scrub", 90 * time.Minute, 0, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.lastSave.Store(t0.Add(tc.lastSave).UnixNano())
			if got := s.due(t0.Add(tc.at), t0.Add(tc.lastScrub)); got != tc.due {
				t.Fatalf("due = %v, want %v", got, tc.due)
			}
		})
	}
	// wrap records the end of a save, and calls the next hook.
	called := false
	now = t0.Add(2 * time.Hour)
	s.wrap(func(*agent.Snapshot) { called = true })(nil)
	if !called || s.lastSave.Load() != now.UnixNano() {
		t.Fatalf("wrap: called %v, last save %d; want %d", called, s.lastSave.Load(), now.UnixNano())
	}
}

// TestScrubRun: run scrubs on a tick when due, and reports each scrub,
// damage or error included; startScrub does nothing for a store that
// cannot scrub or a zero interval.
func TestScrubRun(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := &countingScrubber{rep: plugin.ScrubReport{Damage: []string{"x: damaged"}, Repaired: []string{"x: repaired"}}, done: make(chan struct{})}
	var reports []plugin.ScrubReport
	s := &scrubber{store: st, agentID: "a", interval: time.Minute, idle: time.Second, now: clock, log: zerolog.Nop(),
		report: func(r plugin.ScrubReport, err error) { reports = append(reports, r) }}
	s.lastSave.Store(t0.UnixNano())
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() { s.run(ctx, tick); close(ended) }()
	tick <- t0 // not due
	mu.Lock()
	now = t0.Add(time.Minute)
	mu.Unlock()
	// Due: run scrubs at this tick, or at the one before it when it looked
	// at the clock after the clock moved (the test offered this tick while
	// the scrub waited for it to take st.done, and both waited for good).
	for scrubbed := false; !scrubbed; {
		select {
		case tick <- now:
		case <-st.done:
			scrubbed = true
		}
	}
	tick <- now // just scrubbed: not due
	cancel()
	<-ended
	if st.n != 1 || len(reports) != 1 || len(reports[0].Damage) != 1 {
		t.Fatalf("%d scrubs, reports %+v; want 1 with its damage", st.n, reports)
	}

	if sc, stop := startScrub(struct{}{}, "a", time.Hour, nil, zerolog.Nop()); sc != nil {
		stop()
		t.Fatal("a store without Scrub got a scrubber")
	}
	if sc, stop := startScrub(&countingScrubber{err: errors.New("x")}, "a", 0, nil, zerolog.Nop()); sc != nil {
		stop()
		t.Fatal("scrub_interval 0 got a scrubber")
	}
}
