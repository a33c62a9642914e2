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
// contract JSON (snapshot-bytes). Without /proc the case is skipped.
//
//	4KiB:       a snapshot of about 4 KiB of contract JSON (a short history
//	            that slides by one message, variables, two queued events)
//	window1000: a 1,000-message history of ~200-byte messages; every Save
//	            appends two and drops the two oldest
func BenchmarkSave(b *testing.B, open func(b *testing.B, dir string) plugin.Storage, meters ...Meter) {
	b.Run("4KiB", func(b *testing.B) { benchSave(b, open, meters, newBench(12, 1)) })
	b.Run("window1000", func(b *testing.B) { benchSave(b, open, meters, newBench(1000, 2)) })
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

func benchSave(b *testing.B, open func(b *testing.B, dir string) plugin.Storage, meters []Meter, a *benchAgent) {
	s := open(b, b.TempDir())
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
	paths := []string{"/proc/self/io"}
	for _, m := range meters {
		paths = append(paths, m.IO())
	}
	w0 := make([]int64, len(paths))
	for i, p := range paths {
		w0[i] = wchar(b, p)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
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
		b.ReportMetric(float64(wchar(b, p)-w0[i])/float64(b.N), unit)
	}
	b.ReportMetric(float64(len(js)), "snapshot-bytes")
	reportLatency(b, durs)
}

func reportLatency(b *testing.B, durs []time.Duration) {
	slices.Sort(durs)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(durs[len(durs)/2]), "ms/save-p50")
	b.ReportMetric(ms(durs[min(len(durs)-1, len(durs)*99/100)]), "ms/save-p99")
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
