// Package idletrim returns a process's free heap memory to the operating
// system once the process has gone quiet after work.
//
// The Go runtime keeps the heap pages it frees for reuse, up to its heap
// goal (4 MiB at the least with the default GOGC), and returns to the
// operating system only what lies above it. A daemon or agent that served
// some requests and then idles therefore keeps their garbage's pages
// resident for good: an idle agent measured 2.2 MiB of anonymous memory
// after its start and 7.4 MiB after 1,500 status requests, for as long as
// it stayed idle (docs/figures.md). Run watches how much the process
// allocates and, after a busy spell (Busy bytes allocated since the last
// trim) followed by a quiet interval (at most Quiet bytes), collects once
// and returns the free pages (debug.FreeOSMemory): 7.4 MiB became 4.2. A
// busy process is never trimmed, and an idle one once per busy spell.
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
	// doing (1 MiB): what an idle process allocates in an hour or so.
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
		o.Busy = 1 << 20
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
