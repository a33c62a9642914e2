// Package idletrim returns a process's free heap memory to the operating
// system once the process has gone quiet after work.
//
// The Go runtime keeps the heap pages it frees for reuse up to its heap
// goal (4 MiB at the least with the default GOGC) and its scavenger
// returns only what lies above that. So an idle agent creeps up towards
// the goal on the trickle of its periodic work (the daemon's status
// requests, keepalives): with the embedded broker, from 2.4 MiB of
// anonymous memory after its start to 3.8 MiB forty minutes later
// (docs/figures.md); and after a busy spell it keeps up to 7.4 MiB until
// the runtime's forced collection, two minutes later, lets the scavenger
// bring it down to about 4.5. Run reads how much the process allocates
// every Interval and, once Busy bytes have been allocated since the last
// trim and the last interval was quiet (at most Quiet bytes), collects
// once and returns every free page (debug.FreeOSMemory). A busy process
// is never trimmed; an idle one about every ten minutes of its trickle.
package idletrim

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Options tune Run; the zero value of a field takes its default.
type Options struct {
	// Interval is how often the allocation counter is read (10s).
	Interval time.Duration
	// Busy is how many bytes allocated since the last trim make one worth
	// doing (256 KiB): what an idle agent allocates in about ten minutes.
	Busy uint64
	// Quiet is the most an interval may allocate and count as quiet
	// (64 KiB).
	Quiet uint64
}

func (o Options) withDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Busy == 0 {
		o.Busy = 256 << 10
	}
	if o.Quiet == 0 {
		o.Quiet = 64 << 10
	}
	return o
}

// Run trims the process's heap after each busy spell until ctx ends.
func Run(ctx context.Context, o Options) {
	run(ctx, o, allocated, debug.FreeOSMemory)
}

func run(ctx context.Context, o Options, read func() uint64, trim func()) {
	t := newTrimmer(o, read())
	tick := time.NewTicker(t.o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if t.observe(read()) {
				trim()
			}
		}
	}
}

// trimmer decides when to trim from the process's cumulative allocation
// counter, read once an interval.
type trimmer struct {
	o     Options
	last  uint64 // the counter at the last reading
	since uint64 // bytes allocated since the last trim
}

func newTrimmer(o Options, allocs uint64) *trimmer {
	return &trimmer{o: o.withDefaults(), last: allocs}
}

// observe takes the counter's new reading and says whether to trim now:
// the interval just past was quiet and the spell before it busy.
func (t *trimmer) observe(allocs uint64) bool {
	d := allocs - t.last
	t.last = allocs
	if d > t.o.Quiet {
		t.since += d
		return false
	}
	t.since += d
	if t.since < t.o.Busy {
		return false
	}
	t.since = 0
	return true
}

// allocated reads the bytes the process has allocated on the heap since
// it started.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
