package storagetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Meter is a further metric of BenchmarkSave: the bytes another process
// (a server the store talks to) passed to write calls, per Save.
type Meter struct {
	// Unit is the metric's unit, such as "server-bytes/save".
	Unit string
	// IO returns the path of the process's io file (/proc/PID/io). It is
	// called after open, once per run.
	IO func() string
}

// BenchmarkSave is the Save benchmark of a backend. open opens the backend
// rooted at dir, a fresh b.TempDir, for one run; BenchmarkSave closes it.
// Each case reports the latency of a durable Save (ms/save-p50 and
// ms/save-p99: median and 99th percentile over the run), the bytes this
// process wrote per Save (bytes/save: the wchar of /proc/self/io, so the
// WAL, its checkpoints, a request on a socket, everything), a further
// bytes-written metric for each meter, and the size of the snapshot's
// contract JSON (snapshot-bytes). Before each Save, in the same loop, a
// raw 4 KiB write and fdatasync on the file system of dir (RawSyncer) is
// timed: x_raw is the median Save over the median raw sync, so that the
// ratio is taken on the same disk at the same moment, and ms/raw-p50 is the
// raw sync itself. Without /proc the case is skipped.
//
//	4KiB:       a snapshot of about 4 KiB of contract JSON (a short history
//	            that slides by one message, variables, two queued events)
//	window10:   a 10-message history of ~200-byte messages; every Save
//	            appends two and drops the two oldest
//	window1000: the same with 1,000 messages; it also reports its bytes/save
//	            and median Save over those of window10 (bytes_x_window10,
//	            time_x_window10): what the length of the history costs
//	            (target ≤ 1.5)
func BenchmarkSave(b *testing.B, open func(b *testing.B, dir string) plugin.Storage, meters ...Meter) {
	b.Run("4KiB", func(b *testing.B) { benchSave(b, open, meters, newBench(12, 1), nil) })
	var w10 saveFigures
	b.Run("window10", func(b *testing.B) { w10 = benchSave(b, open, meters, newBench(10, 2), nil) })
	b.Run("window1000", func(b *testing.B) { benchSave(b, open, meters, newBench(1000, 2), &w10) })
}

// saveFigures are the bytes and the median latency per Save of one case.
type saveFigures struct {
	bytes  float64
	median time.Duration
}

// benchAgent is a kernel stand-in: a window of messages that slides by step
// messages a Save.
type benchAgent struct {
	snap *agent.Snapshot
	step int
}

func newBench(window, step int) *benchAgent {
	s := agent.New("bench", baseMs)
	s.Status = agent.StatusWaitingForEvent
	a := &benchAgent{snap: s, step: step}
	for i := 0; i < window; i++ {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, a.message(uint64(i)))
	}
	for i := 0; i < 8; i++ {
		s.Memory.WorkingVariables[fmt.Sprintf("var%d", i)] = strings.Repeat("v", 150)
	}
	s.EventQueueBackup = []agent.Event{
		{Source: "mqtt", Type: "task", ID: "e1", Payload: json.RawMessage(`{"input":"what is the weather like on the board today?"}`)},
		{Source: "timer", Type: "tick", ID: "e2", Payload: json.RawMessage(`null`)},
	}
	return a
}

// message returns a message of about 200 bytes of JSON.
func (a *benchAgent) message(pos uint64) agent.Message {
	c := fmt.Sprintf("message %08d ", pos)
	return agent.Message{Role: "assistant", TaskID: fmt.Sprintf("task-%d", pos/2), Content: c + strings.Repeat("x", 150-len(c))}
}

// next returns the snapshot of the next tick.
func (a *benchAgent) next() *agent.Snapshot {
	s := a.snap.Clone()
	s.TickIndex++
	s.Timestamp += 1000
	s.Memory.WorkingVariables["tick"] = s.TickIndex
	h := s.Memory.ShortTermHistory
	for i := 0; i < a.step; i++ {
		h = append(h, a.message(s.HistorySeq+uint64(len(h))))
	}
	s.Memory.ShortTermHistory = h[a.step:]
	s.HistorySeq += uint64(a.step)
	a.snap = s
	return s
}

func benchSave(b *testing.B, open func(b *testing.B, dir string) plugin.Storage, meters []Meter, a *benchAgent, base *saveFigures) saveFigures {
	dir := b.TempDir()
	raw := NewRawSyncer(b, dir)
	s := open(b, dir)
	defer s.Close()
	if err := s.Save(ctx, a.next()); err != nil { // the first Save writes the whole window
		b.Fatal(err)
	}
	js, _ := agent.Encode(a.snap)
	snaps := make([]*agent.Snapshot, b.N)
	for i := range snaps {
		snaps[i] = a.next()
	}
	durs := make([]time.Duration, b.N)
	raws := make([]time.Duration, b.N)
	paths := []string{"/proc/self/io"}
	for _, m := range meters {
		paths = append(paths, m.IO())
	}
	w0 := make([]int64, len(paths))
	for i, p := range paths {
		w0[i] = wchar(b, p)
	}
	b.ResetTimer()
	var rawWritten int64
	var fig saveFigures
	for i := 0; i < b.N; i++ {
		// The raw sync's own 4 KiB are taken out of bytes/save below.
		t0 := time.Now()
		raw.Sync(b)
		raws[i] = time.Since(t0)
		rawWritten += 4096
		t0 = time.Now()
		if err := s.Save(ctx, snaps[i]); err != nil {
			b.Fatal(err)
		}
		durs[i] = time.Since(t0)
	}
	b.StopTimer()
	for i, p := range paths {
		unit := "bytes/save"
		if i > 0 {
			unit = meters[i-1].Unit
		}
		w := wchar(b, p) - w0[i]
		if i == 0 {
			w -= rawWritten
			fig.bytes = float64(w) / float64(b.N)
		}
		b.ReportMetric(float64(w)/float64(b.N), unit)
	}
	b.ReportMetric(float64(len(js)), "snapshot-bytes")
	fig.median = reportLatency(b, durs, raws)
	if base != nil && base.bytes > 0 && base.median > 0 {
		b.ReportMetric(fig.bytes/base.bytes, "bytes_x_window10")
		b.ReportMetric(float64(fig.median)/float64(base.median), "time_x_window10")
	}
	return fig
}

// reportLatency reports the median and 99th percentile of durs and the
// ratio of the median to that of raws, and returns the median.
func reportLatency(b *testing.B, durs, raws []time.Duration) time.Duration {
	slices.Sort(durs)
	slices.Sort(raws)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(durs[len(durs)/2]), "ms/save-p50")
	b.ReportMetric(ms(durs[min(len(durs)-1, len(durs)*99/100)]), "ms/save-p99")
	b.ReportMetric(ms(raws[len(raws)/2]), "ms/raw-p50")
	b.ReportMetric(float64(durs[len(durs)/2])/float64(raws[len(raws)/2]), "x_raw")
	b.ReportMetric(0, "ns/op") // the loop times raw syncs too: ns/op says nothing
	return durs[len(durs)/2]
}

// wchar returns the bytes a process has passed to write calls so far, from
// its /proc io file at path; without it, it skips the benchmark.
func wchar(b *testing.B, path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		b.Skipf("bytes/save needs %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skipf("no wchar in %s", path)
	return 0
}
