package bbolt

import (
	"encoding/binary"
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestTaskCountKeyLast: the task index's count sorts after every time entry,
// so that a Save rewrites it in the page it appends to, not in a page of its
// own between the id entries and the time entries; a count a file of an
// older version keeps under 'n' is read and moved.
func TestTaskCountKeyLast(t *testing.T) {
	result := func(seq uint64, ms int64) agent.Result {
		return agent.Result{Seq: seq, TaskID: fmt.Sprintf("t%03d", seq), AgentID: "cnt", Status: agent.ResultDone, FinishedAt: ms}
	}
	s := mustOpen(t, t.TempDir(), Options{})
	snap := storagetest.Sample("cnt", 1)
	snap.Outbox = nil
	for seq := uint64(0); seq < 50; seq++ {
		snap.Outbox = append(snap.Outbox, result(seq, snap.Timestamp))
	}
	mustSave(t, s, snap)
	db := agentDB(t, s, "cnt")
	if err := db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketTasks).Cursor().Last()
		if len(k) != 1 || k[0] != keyTaskCount {
			t.Errorf("last key of the task index %q, want the count", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// An older file: the count under 'n'.
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTasks)
		n, err := taskCount(b)
		if err != nil || n != 50 {
			t.Fatalf("count %d, %v", n, err)
		}
		if err := b.Delete([]byte{keyTaskCount}); err != nil {
			return err
		}
		old := []byte{keyTaskCountOld}
		return b.Put(old, appendFrame(nil, old, binary.BigEndian.AppendUint64(nil, n)))
	}); err != nil {
		t.Fatal(err)
	}
	snap.Outbox = []agent.Result{result(50, snap.Timestamp)}
	mustSave(t, s, snap)
	if err := agentDB(t, s, "cnt").View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTasks)
		if b.Get([]byte{keyTaskCountOld}) != nil {
			t.Error("the old count key is still there")
		}
		if n, err := taskCount(b); err != nil || n != 51 {
			t.Errorf("count %d, %v; want 51", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
