package main

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
)

// BenchmarkEndToEndTicks measures durable ticks per second with the echo
// brain on a real bbolt store in the benchmark's temporary directory: each
// task is accepted (durable), processed, saved, and its result read back.
// Tasks are kept in flight in windows of 32, as a hub would send them.
func BenchmarkEndToEndTicks(b *testing.B) {
	dir := b.TempDir()
	st, err := bbolt.Open(dir, bbolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	tmpl, err := design.Decode(mustShipped(b, "echo"))
	if err != nil {
		b.Fatal(err)
	}
	rt, err := host.Start(context.Background(), host.Agent{ID: "bench", Template: tmpl, Store: st,
		DataDir: dir, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Stop(context.Background())
	ctx := context.Background()
	const window = 32
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += window {
		n := min(window, b.N-i)
		ids := make([]string, n)
		done := make(chan error, n)
		for j := 0; j < n; j++ {
			ids[j] = fmt.Sprintf("t%d", i+j)
			go func(id string) {
				ev, _ := agent.TaskEvent(&agent.Task{TaskID: id, Input: []byte(`"payload"`)}, "bench", 0)
				done <- rt.Submit(ctx, ev).Err
			}(ids[j])
		}
		for j := 0; j < n; j++ {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		for _, id := range ids {
			for {
				s, ok, err := rt.TaskState(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				if ok && s.Status == agent.ResultDone {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "ticks/s")
}

func mustShipped(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := fs.ReadFile(design.Shipped(), name+".json")
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
