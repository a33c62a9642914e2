package bbolt

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// BenchmarkSaveBurst is one Save of a burst of MQTT tasks as the runtime
// makes them under load (issue #35): per Save, perTask 1 KiB tasks queued
// and as many results of 1 KiB appended to the outbox (those of the Save
// before confirmed and dropped) and to the task index, and two history
// messages a task. Such a Save is larger than the journal and folds. Its
// allocs/op and B/op are the store's own work; ns/op includes the fold's
// fsyncs.
func BenchmarkSaveBurst(b *testing.B) {
	const perTask = 150
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := agent.New("burst", 1_700_000_000_000)
	snap.Status = agent.StatusWaitingForEvent
	out, _ := json.Marshal(strings.Repeat("x", 990))
	var next uint64 // tasks so far
	step := func() *agent.Snapshot {
		snap.TickIndex++
		snap.Timestamp += 10
		// The queue: this burst's tasks replace the last one's.
		snap.QueueSeq += uint64(len(snap.EventQueueBackup))
		snap.EventQueueBackup = snap.EventQueueBackup[:0:0]
		snap.Outbox = nil
		for i := range perTask {
			id := fmt.Sprintf("task-%08d", next+uint64(i))
			payload := `{"task_id":"` + id + `","type":"bench","input":` + string(out) + `}`
			snap.EventQueueBackup = append(snap.EventQueueBackup, agent.Event{Source: "mqtt", Type: "task",
				Payload: json.RawMessage(payload), ID: id, ReceivedAt: snap.Timestamp})
			snap.Outbox = append(snap.Outbox, agent.Result{Seq: next + uint64(i), TaskID: id, AgentID: "burst",
				Status: agent.ResultDone, Output: out, TickIndex: snap.TickIndex, Source: "mqtt", FinishedAt: snap.Timestamp})
			snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory,
				agent.Message{Role: "user", Content: id}, agent.Message{Role: "assistant", Content: string(out)})
		}
		if n := len(snap.Memory.ShortTermHistory); n > 2*perTask {
			snap.HistorySeq += uint64(n - 2*perTask)
			snap.Memory.ShortTermHistory = snap.Memory.ShortTermHistory[n-2*perTask:]
		}
		next += perTask
		snap.NextResultSeq = next
		return snap
	}
	for range 10 { // the file grown
		if err := s.Save(ctx, step()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		snap := step()
		b.StartTimer()
		if err := s.Save(ctx, snap); err != nil {
			b.Fatal(err)
		}
	}
}
