package bbolt

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestVersion1File loads a file written by the version that kept the outbox
// and the recent event ids in the record's body (testdata/v1-state.db.gz),
// saves over it, and loads again: nothing is lost on the way to the list
// layout, and the old generation stays readable as the previous one.
func TestVersion1File(t *testing.T) {
	dir := t.TempDir()
	storagetest.Gunzip(t, filepath.Join("testdata", "v1-state.db.gz"), filepath.Join(dir, "v1agent", "state.db"))

	s := mustOpen(t, dir, Options{})
	got, err := s.Load(ctx, "v1agent")
	if err != nil || got == nil {
		t.Fatalf("Load of a version 1 file = %v, %v", got, err)
	}
	if len(got.Outbox) != 2 || got.Outbox[1].TaskID != "t2" || string(got.Outbox[1].Output) != `"world"` ||
		len(got.RecentEventIDs) != 3 || got.RecentEventIDs[2] != "t3" || len(got.EventQueueBackup) != 1 ||
		len(got.Memory.ShortTermHistory) != 2 || got.NextResultSeq != 3 {
		t.Fatalf("version 1 snapshot loaded as %s", encode(t, got))
	}

	// The first Save writes the outbox and the ids as lists; later ones
	// continue them.
	next := got.Clone()
	next.Outbox = next.Outbox[1:]
	next.Outbox = append(next.Outbox, agent.Result{Seq: 3, TaskID: "t3", AgentID: "v1agent", Status: "done",
		Output: json.RawMessage(`"queued"`), TickIndex: 8})
	next.NextResultSeq = 4
	next.EventQueueBackup = nil
	next.QueueSeq++
	next.RecentEventIDs = append(next.RecentEventIDs, "t4")
	next.TickIndex = 8
	mustSave(t, s, next)
	next = next.Clone()
	next.Outbox = append(next.Outbox, agent.Result{Seq: 4, TaskID: "t4", AgentID: "v1agent", Status: "done", TickIndex: 9})
	next.NextResultSeq = 5
	next.TickIndex = 9
	mustSave(t, s, next)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, dir, Options{})
	loaded, err := again.Load(ctx, "v1agent")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, loaded, next)
}

// TestListsWriteOnlyWhatChanged: a Save after a tick writes the new outbox
// result and the new recent id, not the whole outbox and id window: the
// bytes a Save writes do not grow with the outbox (a hub away for an hour)
// or with the id window.
func TestListsWriteOnlyWhatChanged(t *testing.T) {
	perSave := func(backlog int) float64 {
		s := mustOpen(t, t.TempDir(), Options{})
		snap := agent.New("backlog", 1_700_000_000_000)
		snap.NextResultSeq = 1
		result := func() agent.Result {
			seq := snap.NextResultSeq
			snap.NextResultSeq++
			return agent.Result{Seq: seq, TaskID: fmt.Sprintf("task-%06d", seq), AgentID: "backlog", Status: "done",
				Output: json.RawMessage(fmt.Sprintf("%q", fmt.Sprintf("%0900d", seq)))}
		}
		for range backlog {
			snap.Outbox = append(snap.Outbox, result())
			snap.RecentEventIDs = append(snap.RecentEventIDs, snap.Outbox[len(snap.Outbox)-1].TaskID)
		}
		mustSave(t, s, snap)
		db := agentDB(t, s, "backlog")
		a, _ := s.agents.Get("backlog")
		// bbolt's pages and the journal's.
		written := func() int64 { st := db.Stats(); return st.TxStats.GetWrite() + a.jr.pages }
		before := written()
		const saves = 100
		for range saves {
			snap.TickIndex++
			snap.Outbox = append(snap.Outbox, result())
			snap.RecentEventIDs = append(snap.RecentEventIDs, snap.Outbox[len(snap.Outbox)-1].TaskID)
			mustSave(t, s, snap)
		}
		return float64(written()-before) / saves
	}
	small, large := perSave(10), perSave(3000)
	t.Logf("pages written per Save: %.2f with 10 results waiting, %.2f with 3,000", small, large)
	// 3,000 results of 1 KiB are 750 pages: a Save that rewrote the outbox
	// would write that many. Appending to a deeper tree costs a page or
	// two of branches more.
	if large > 2*small {
		t.Fatalf("a Save writes %.2f pages with 3,000 results waiting and %.2f with 10", large, small)
	}
}

// TestOutboxHole: a result confirmed out of order leaves a hole in the
// outbox's numbering; the outbox is then written in full under fresh keys,
// and the next Saves continue from there.
func TestOutboxHole(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	snap := agent.New("hole", 1_700_000_000_000)
	for seq := uint64(1); seq <= 5; seq++ {
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: seq, TaskID: fmt.Sprintf("t%d", seq), AgentID: "hole", Status: "done"})
	}
	snap.NextResultSeq = 6
	mustSave(t, s, snap)
	steps := []func(){
		func() { snap.Outbox = append(snap.Outbox[:2:2], snap.Outbox[3:]...) }, // confirm seq 3 first
		func() { snap.Outbox = snap.Outbox[1:] },                               // then seq 1
		func() {
			snap.Outbox = append(snap.Outbox, agent.Result{Seq: 6, TaskID: "t6", AgentID: "hole", Status: "failed", Error: "x"})
			snap.NextResultSeq = 7
		},
		func() { snap.Outbox = snap.Outbox[1:] }, // seq 2: contiguous again (4, 5, 6)
		func() { snap.Outbox = snap.Outbox[:0] },
	}
	for i, step := range steps {
		step()
		snap.TickIndex++
		mustSave(t, s, snap)
		got, err := s.Load(ctx, "hole")
		if err != nil {
			t.Fatal(err)
		}
		storagetest.MustEqual(t, got, snap)
		// Only the elements the record names are left (after the batch of
		// deletions catches up, at most the previous generation's too).
		n := countKeys(t, agentDB(t, s, "hole"), prefixOutbox)
		if n > 2*len(snap.Outbox)+5 {
			t.Fatalf("step %d: %d outbox elements stored for %d results", i, n, len(snap.Outbox))
		}
	}
}

func countKeys(t *testing.T, db *bolt.DB, prefix byte) int {
	t.Helper()
	n := 0
	err := db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSnapshot).Cursor()
		for k, _ := c.Seek([]byte{prefix}); k != nil && k[0] == prefix; k, _ = c.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
