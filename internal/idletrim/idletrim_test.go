package idletrim

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestObserve: a trim comes once per busy spell, in the first quiet
// interval after it; never while busy, never for the trickle of an idle
// process, and again after the next spell.
func TestObserve(t *testing.T) {
	const ki = 1 << 10
	o := Options{Interval: time.Second, Busy: 1024 * ki, Quiet: 64 * ki}
	for _, tc := range []struct {
		name   string
		deltas []uint64 // bytes allocated in each interval
		want   []bool
	}{
		{"busy then quiet", []uint64{4096 * ki, 8 * ki, 8 * ki}, []bool{false, true, false}},
		{"busy throughout", []uint64{4096 * ki, 4096 * ki, 4096 * ki}, []bool{false, false, false}},
		{"idle trickle", []uint64{8 * ki, 8 * ki, 8 * ki, 8 * ki}, []bool{false, false, false, false}},
		{"small spells add up", []uint64{600 * ki, 0, 600 * ki, 0}, []bool{false, false, false, true}},
		{"two spells, two trims", []uint64{2048 * ki, 0, 0, 2048 * ki, 0}, []bool{false, true, false, false, true}},
		{"quiet at the limit", []uint64{2048 * ki, 64 * ki}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrimmer(o, 1000)
			c := uint64(1000)
			for i, d := range tc.deltas {
				c += d
				if got := tr.observe(c); got != tc.want[i] {
					t.Fatalf("interval %d (%d bytes): trim %v, want %v", i, d, got, tc.want[i])
				}
			}
		})
	}
}

// TestDefaults: a zero Options reads every 10 s, trims after 256 KiB.
func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Interval != 10*time.Second || o.Busy != 256<<10 || o.Quiet != 64<<10 {
		t.Fatalf("defaults %+v", o)
	}
}

var sink [][]byte

// TestRunReturnsMemory runs the trimmer in this process: 3 MiB of garbage,
// under the runtime's heap goal, stays resident after a collection; the
// trim that follows the quiet interval returns it to the operating system,
// and Run ends with its context.
func TestRunReturnsMemory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var freed atomic.Int64
	var trims atomic.Int32
	done := make(chan struct{})
	first := true
	read := func() uint64 {
		if first {
			first = false
			defer close(started)
		}
		return allocated()
	}
	go func() {
		defer close(done)
		run(ctx, Options{Interval: 20 * time.Millisecond, Busy: 2 << 20, Quiet: 256 << 10}, read, func() {
			before := released()
			debug.FreeOSMemory()
			freed.Add(int64(released() - before))
			trims.Add(1)
		})
	}()
	<-started
	for range 48 {
		sink = append(sink, make([]byte, 64<<10))
	}
	sink = nil
	runtime.GC()
	wait.Until(t, 30*time.Second, "a trim after the busy spell", func() error {
		if trims.Load() == 0 {
			return errors.New("no trim yet")
		}
		return nil
	})
	if n := freed.Load(); n < 2<<20 {
		t.Errorf("the trim returned %d bytes, want at least 2 MiB of the 3 MiB of garbage", n)
	}
	cancel()
	<-done
}

// released reads the bytes of heap returned to the operating system.
func released() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
