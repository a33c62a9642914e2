//go:build linux

package bbolt

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// The benchmarks measure what a Save costs against what the disk allows:
//
//	go test -run '^$' -bench . -benchtime 300x ./storage/bbolt/
//
// BenchmarkRawFdatasync is the physical limit: one 4 KiB write and one
// fdatasync. Every BenchmarkSave case runs one of those before each Save, in
// the same loop, and reports its median Save as a multiple of their median
// (x_raw), so that the ratio is taken on the same disk at the same moment.
// Metrics:
//
//	median-ms/save, p99-ms/save  per-Save wall time, collected one by one
//	bytes/save                   bytes handed to write(2) and friends, from
//	                             the wchar of /proc/self/io, divided by b.N
//	median-ms/raw                median raw write+fdatasync of the loop
//	x_raw                        median Save / median raw write+fdatasync
//
// (BenchmarkRawFdatasync reports the same per sync.)
//
// Targets: snapshot4KiB x_raw ≤ 2.5; history1000 time and bytes ≤ 1.5× those
// of history10.

func BenchmarkRawFdatasync(b *testing.B) {
	r := storagetest.NewRawSyncer(b, b.TempDir()) // warmed up
	d := make([]time.Duration, b.N)
	w0 := wchar(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r.Sync(b)
		d[i] = time.Since(t0)
	}
	b.StopTimer()
	report(b, d, w0, "sync")
}

func BenchmarkSave(b *testing.B) {
	cases := []struct {
		name string
		init func() (first *agent.Snapshot, step func() *agent.Snapshot)
	}{
		{"snapshot4KiB", snapshot4KiB},
		{"history10", windowCase(10)},
		{"history100", windowCase(100)},
		{"history1000", windowCase(1000)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			raw := storagetest.NewRawSyncer(b, b.TempDir()) // warmed up

			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			first, step := tc.init()
			if err := s.Save(ctx, first); err != nil {
				b.Fatal(err)
			}
			// Reach the steady state: the file grown, the freelist warm.
			for i := 0; i < 100; i++ {
				if err := s.Save(ctx, step()); err != nil {
					b.Fatal(err)
				}
			}

			// One raw sync before each Save, in the same loop, so that a
			// disk that gets busier or quieter during the run moves both.
			d := make([]time.Duration, b.N)
			rd := make([]time.Duration, b.N)
			w0 := wchar(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				raw.Sync(b)
				rd[i] = time.Since(t0)
				snap := step()
				t0 = time.Now()
				if err := s.Save(ctx, snap); err != nil {
					b.Fatal(err)
				}
				d[i] = time.Since(t0)
			}
			b.StopTimer()
			if w0 >= 0 {
				w0 += int64(b.N) * storagetest.RawSyncBytes // the raw syncs' own bytes are not the Saves'
			}
			report(b, d, w0, "save")
			b.ReportMetric(float64(percentile(rd, 50))/1e6, "median-ms/raw")
			b.ReportMetric(float64(percentile(d, 50))/float64(percentile(rd, 50)), "x_raw")
			b.ReportMetric(0, "ns/op") // the loop times the raw syncs too
		})
	}
}

// snapshot4KiB is an agent whose whole contract JSON is about 4 KiB and that
// saves a new tick with a changed working variable and nothing appended.
func snapshot4KiB() (*agent.Snapshot, func() *agent.Snapshot) {
	s := agent.New("four-k", 1_700_000_000_000)
	s.Status = agent.StatusWaitingForEvent
	s.SessionID = "bench-session"
	for i := 0; i < 8; i++ {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, agent.Message{
			Role: []string{"user", "assistant"}[i%2], Content: fmt.Sprintf("message %d %s", i, strings.Repeat("m", 200))})
	}
	for i := 0; i < 20; i++ {
		s.Memory.WorkingVariables[fmt.Sprintf("var%02d", i)] = strings.Repeat("v", 80)
	}
	s.RecentEventIDs = []string{"evt-1", "evt-2", "evt-3"}
	js, _ := agent.Encode(s)
	if n := len(js); n < 3800 || n > 4400 {
		panic(fmt.Sprintf("snapshot4KiB is %d bytes", n))
	}
	return s, func() *agent.Snapshot {
		s.TickIndex++
		s.Timestamp += 1000
		s.Memory.WorkingVariables["tick"] = float64(s.TickIndex)
		return s
	}
}

// windowCase is an agent with a history of n messages of about 200 bytes
// that slides by one user and one assistant message a Save.
func windowCase(n int) func() (*agent.Snapshot, func() *agent.Snapshot) {
	return func() (*agent.Snapshot, func() *agent.Snapshot) {
		w := newWindow(fmt.Sprintf("window-%d", n), n, 200)
		return w.snap, w.step
	}
}

// report adds the metrics of the operations (op: "save", "sync") of
// durations d and of the bytes written since w0.
func report(b *testing.B, d []time.Duration, w0 int64, op string) {
	b.ReportMetric(float64(percentile(d, 50))/1e6, "median-ms/"+op)
	b.ReportMetric(float64(percentile(d, 99))/1e6, "p99-ms/"+op)
	if w0 >= 0 {
		if w1 := wchar(b); w1 >= 0 {
			b.ReportMetric(float64(w1-w0)/float64(b.N), "bytes/"+op)
		}
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// wchar returns the bytes this process has passed to write(2) and friends,
// or -1 when /proc/self/io cannot be read.
func wchar(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return -1
}

// BenchmarkTuning measures what each choice of defaultTuning buys: every
// variant changes one choice (mostly back to bbolt's default). To be fair on
// a shared, noisy disk, each iteration does one raw write+fdatasync and then
// one Save, and x_raw is the ratio of the two medians. first200-ms is the
// time of the first 200 Saves of a new file, when it grows; disk-KiB is the
// space the file then takes.
func BenchmarkTuning(b *testing.B) {
	variants := []struct {
		name string
		tune func(*tuning)
	}{
		{"default", func(*tuning) {}},
		{"FreelistSync", func(t *tuning) { t.bolt.NoFreelistSync = false }},
		{"ArrayFreelist", func(t *tuning) { t.bolt.FreelistType = bolt.FreelistArrayType }},
		{"NoInitialMmap", func(t *tuning) { t.bolt.InitialMmapSize = 0 }},
		{"AllocSize16MiB", func(t *tuning) { t.allocSize = 16 << 20 }},
		{"FillPercent50", func(t *tuning) { t.fillPercent = bolt.DefaultFillPercent }},
		{"FillPercent90", func(t *tuning) { t.fillPercent = 0.9 }},
		{"DropEverySave", func(t *tuning) { t.dropBatch = 1 }},
		{"NoJournal", func(t *tuning) { t.journalSize = 0 }},
		{"Journal32KiB", func(t *tuning) { t.journalSize = 32 << 10 }},
		{"Journal512KiB", func(t *tuning) { t.journalSize = 512 << 10 }},
	}
	workloads := []struct {
		name string
		init func() (*agent.Snapshot, func() *agent.Snapshot)
	}{
		{"snapshot4KiB", snapshot4KiB},
		{"history10", windowCase(10)},
		{"history1000", windowCase(1000)},
	}
	for _, v := range variants {
		for _, w := range workloads {
			b.Run(v.name+"/"+w.name, func(b *testing.B) {
				raw := storagetest.NewRawSyncer(b, b.TempDir())
				dir := b.TempDir()
				s, err := Open(dir, Options{tune: v.tune})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				first, step := w.init()
				// The first 200 Saves from a new file: growth and remapping.
				t0 := time.Now()
				if err := s.Save(ctx, first); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < 199; i++ {
					if err := s.Save(ctx, step()); err != nil {
						b.Fatal(err)
					}
				}
				warmup := time.Since(t0)
				rd := make([]time.Duration, b.N)
				sd := make([]time.Duration, b.N)
				var written int64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					raw.Sync(b)
					rd[i] = time.Since(t0)
					snap := step()
					w0 := wchar(b)
					t0 = time.Now()
					if err := s.Save(ctx, snap); err != nil {
						b.Fatal(err)
					}
					sd[i] = time.Since(t0)
					written += wchar(b) - w0
				}
				b.StopTimer()
				b.ReportMetric(float64(percentile(sd, 50))/1e6, "median-ms/save")
				b.ReportMetric(float64(percentile(sd, 99))/1e6, "p99-ms/save")
				b.ReportMetric(float64(written)/float64(b.N), "bytes/save")
				b.ReportMetric(float64(percentile(sd, 50))/float64(percentile(rd, 50)), "x_raw")
				b.ReportMetric(float64(warmup)/1e6, "first200-ms")
				var st unix.Stat_t
				if err := unix.Stat(filepath.Join(dir, first.AgentID, FileName), &st); err == nil {
					b.ReportMetric(float64(st.Blocks*512)/1024, "disk-KiB")
				}
			})
		}
	}
}
