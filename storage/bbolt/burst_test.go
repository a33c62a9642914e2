package bbolt

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// burst returns the Saves of an agent under a burst of MQTT tasks as the
// runtime makes them (issue #35): per Save, perTask 1 KiB tasks queued and
// as many results of 1 KiB appended to the outbox (those of the Save
// before confirmed and dropped) and to the task index, and two history
// messages a task. Such a Save is larger than the journal and folds.
func burst(id string, perTask int) func() *agent.Snapshot {
	snap := agent.New(id, 1_700_000_000_000)
	snap.Status = agent.StatusWaitingForEvent
	out, _ := json.Marshal(strings.Repeat("x", 990))
	var next uint64 // tasks so far
	return func() *agent.Snapshot {
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
			snap.Outbox = append(snap.Outbox, agent.Result{Seq: next + uint64(i), TaskID: id, AgentID: snap.AgentID,
				Status: agent.ResultDone, Output: out, TickIndex: snap.TickIndex, Source: "mqtt", FinishedAt: snap.Timestamp})
			snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory,
				agent.Message{Role: "user", Content: id}, agent.Message{Role: "assistant", Content: string(out)})
		}
		if n := len(snap.Memory.ShortTermHistory); n > 2*perTask {
			snap.HistorySeq += uint64(n - 2*perTask)
			snap.Memory.ShortTermHistory = snap.Memory.ShortTermHistory[n-2*perTask:]
		}
		next += uint64(perTask)
		snap.NextResultSeq = next
		return snap
	}
}

// TestBurstPagesPacked: the pages a burst's Saves fold are packed, the
// task index's (indexFill) and the lists' (burstFill), not left a third or
// half empty as bbolt's splits of such pages leave them by default: a
// page written is a page the disk and the fold's time pay for.
func TestBurstPagesPacked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	step := burst("packed", 300)
	for range 4 {
		if err := s.Save(ctx, step()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "packed", FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketTasks, bucketSnapshot} {
			st := tx.Bucket(name).Stats()
			used := float64(st.LeafInuse) / float64(st.LeafPageN*db.Info().PageSize)
			t.Logf("%s: %d leaf pages, %.2f of them in use", name, st.LeafPageN, used)
			if used < 0.8 {
				t.Errorf("%s: %d leaf pages, %.2f of them in use, want at least 0.8", name, st.LeafPageN, used)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
