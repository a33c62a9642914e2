package bbolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/bbolt/bolttest"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

var ctx = context.Background()

// openStorage opens the store in dir for the conformance suite and the crash
// test.
func openStorage(t *testing.T, dir string) plugin.Storage {
	s, err := Open(dir, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{
		Open: openStorage,
		CorruptLatest: func(t *testing.T, dir, agentID string) {
			corruptRecords(t, filepath.Join(dir, agentID, FileName), true)
		},
		CorruptAll: func(t *testing.T, dir, agentID string) {
			corruptRecords(t, filepath.Join(dir, agentID, FileName), false)
		},
		Files: func(dir, agentID string) []string { return []string{filepath.Join(dir, agentID, FileName)} },
	})
}

// corruptRecords flips bytes in the middle of the newest generation record
// (all of them when !newestOnly) of the file at path.
func corruptRecords(t *testing.T, path string, newestOnly bool) {
	t.Helper()
	if _, err := bolttest.FlipGenerations(path, newestOnly); err != nil {
		t.Fatal(err)
	}
}

// flipValue flips the bits of two bytes in the middle of the value of k.
func flipValue(t *testing.T, b *bolt.Bucket, k []byte) {
	t.Helper()
	v := append([]byte(nil), b.Get(k)...)
	if len(v) < 2 {
		t.Fatalf("value of %x has %d bytes", k, len(v))
	}
	v[len(v)/2] ^= 0xff
	v[len(v)-1] ^= 0x01
	if err := b.Put(k, v); err != nil {
		t.Fatal(err)
	}
}

// editBucket runs fn on the snapshot bucket of the bbolt file at path.
func editBucket(t *testing.T, path string, fn func(b *bolt.Bucket)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshot)
		if b == nil {
			return fmt.Errorf("no snapshot bucket in %s", path)
		}
		fn(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger writes the store's log lines to the test log.
func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t))
}

func mustOpen(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	opts.Logger = testLogger(t)
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// agentDB returns the open bbolt file of an agent of s, with the Saves in
// its journal folded into it, so that the file holds all of them.
func agentDB(t *testing.T, s *Store, id string) *bolt.DB {
	t.Helper()
	a, err := s.agents.Get(id)
	if err != nil || a == nil || a.db == nil {
		t.Fatalf("agent %s has no open file (%v)", id, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tx != nil {
		if err := s.fold(a, a.tx); err != nil {
			t.Fatalf("fold: %v", err)
		}
	}
	return a.db
}

func mustSave(t *testing.T, s *Store, snap *agent.Snapshot) {
	t.Helper()
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
}

func encode(t *testing.T, s *agent.Snapshot) string {
	t.Helper()
	js, err := agent.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

func checkLoad(t *testing.T, s *Store, want *agent.Snapshot) {
	t.Helper()
	got, err := s.Load(ctx, want.AgentID)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got == nil {
		t.Fatal("Load: nil")
	}
	if g, w := encode(t, got), encode(t, want); g != w {
		t.Fatalf("Load = tick %d\n%s\nwant tick %d\n%s", got.TickIndex, g, want.TickIndex, w)
	}
}

func TestGarbageFileIsCorruptAndUntouched(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 100, 4096, 8192, 64 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "garbage", FileName)
			if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
				t.Fatal(err)
			}
			garbage := make([]byte, size)
			for i := range garbage {
				garbage[i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(path, garbage, 0o600); err != nil {
				t.Fatal(err)
			}
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}

			s := mustOpen(t, dir, Options{})
			got, err := s.Load(ctx, "garbage")
			if !errors.Is(err, plugin.ErrCorrupt) || got != nil {
				t.Fatalf("Load = %v, %v; want nil and ErrCorrupt", got, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
			if err := s.Save(ctx, storagetest.Sample("garbage", 1)); !errors.Is(err, plugin.ErrCorrupt) {
				t.Fatalf("Save over a garbage file: %v; want ErrCorrupt", err)
			}
			if _, err := s.TaskResult(ctx, "garbage", "task-1"); !errors.Is(err, plugin.ErrCorrupt) {
				t.Fatalf("TaskResult: %v; want ErrCorrupt", err)
			}

			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, garbage) {
				t.Fatalf("the garbage file was modified (%d bytes, was %d)", len(after), len(garbage))
			}
			if st, _ := os.Stat(path); !st.ModTime().Equal(before.ModTime()) {
				t.Fatalf("the garbage file's mtime changed")
			}

			// Delete is how an operator starts over.
			if err := s.Delete(ctx, "garbage"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the garbage file is still there after Delete: %v", err)
			}
			fresh := storagetest.Sample("garbage", 2)
			mustSave(t, s, fresh)
			checkLoad(t, s, fresh)
		})
	}
}

func TestSecondStoreIsLocked(t *testing.T) {
	dir := t.TempDir()
	first := mustOpen(t, dir, Options{})
	snap := storagetest.Sample("busy", 1)
	mustSave(t, first, snap)

	second, err := Open(dir, Options{LockTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	path := filepath.Join(first.Dir(), "busy", FileName)
	want := fmt.Sprintf("agent %q is already running: its store %s is locked by another process", "busy", path)

	start := time.Now()
	_, err = second.Load(ctx, "busy")
	if !errors.Is(err, plugin.ErrLocked) {
		t.Fatalf("Load from a second store: %v; want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("waited %v for the lock; the timeout is 20ms", waited)
	}
	if err := second.Save(ctx, storagetest.Sample("busy", 2)); !errors.Is(err, plugin.ErrLocked) {
		t.Fatalf("Save from a second store: %v; want ErrLocked", err)
	}
	if err := second.Delete(ctx, "busy"); !errors.Is(err, plugin.ErrLocked) {
		t.Fatalf("Delete from a second store: %v; want ErrLocked", err)
	}
	if _, err := second.TaskResult(ctx, "busy", "task-1"); !errors.Is(err, plugin.ErrLocked) {
		t.Fatalf("TaskResult from a second store: %v; want ErrLocked", err)
	}
	// Other agents are free.
	mustSave(t, second, storagetest.Sample("idle", 1))

	// Once the first store lets go, the second gets the agent, intact.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	checkLoad(t, second, snap)
}

// twoGenerations saves two generations of agent id in dir, the second with
// one more history message, closes the store and returns both.
func twoGenerations(t *testing.T, dir, id string) (first, second *agent.Snapshot) {
	t.Helper()
	s := mustOpen(t, dir, Options{})
	a := storagetest.Sample(id, 1)
	mustSave(t, s, a)
	b := a.Clone()
	b.TickIndex = 2
	b.Memory.ShortTermHistory = append(b.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "new"})
	mustSave(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestCorruptElement damages an element only the newest generation
// references: Load must notice and return the previous generation.
func TestCorruptElement(t *testing.T) {
	dir := t.TempDir()
	a, _ := twoGenerations(t, dir, "elements")
	editBucket(t, filepath.Join(dir, "elements", FileName), func(bk *bolt.Bucket) {
		last, ok := lastKey(bk, prefixHistory)
		if !ok {
			t.Fatal("no history element")
		}
		flipValue(t, bk, key(prefixHistory, last))
	})
	s := mustOpen(t, dir, Options{})
	checkLoad(t, s, a)
}

// TestReopenWithoutClose copies the files of a store that was never closed
// (state.db and its journal), as a machine that stops dead would leave
// them, and loads the copy.
func TestReopenWithoutClose(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	snap := storagetest.Sample("copied", 1)
	for tick := uint64(1); tick <= 20; tick++ {
		snap = storagetest.Sample("copied", tick)
		mustSave(t, s, snap)
	}
	copyDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(copyDir, "copied"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName, JournalName} {
		data, err := os.ReadFile(filepath.Join(dir, "copied", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyDir, "copied", name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checkLoad(t, mustOpen(t, copyDir, Options{}), snap)
}

// The crash test (storagetest.RunCrash): a child process saves in a loop and
// reports each tick after Save returned; the parent SIGKILLs it at a random
// moment, then the last acknowledged tick, or the one in flight, must load,
// whole.

// crashSnapshot is the snapshot of tick: a sliding history of 40 messages
// (two a tick) and a queue of 3 events sliding by one a tick, so that
// consecutive ticks are what the kernel would save.
func crashSnapshot(tick uint64) *agent.Snapshot {
	s := agent.New("crash", 1_700_000_000_000+int64(tick))
	s.TickIndex = tick
	s.Status = agent.StatusWaitingForEvent
	s.Memory.WorkingVariables["tick"] = float64(tick)
	s.HistorySeq = max(2*tick, 40) - 40
	for pos := s.HistorySeq; pos < 2*tick; pos++ {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory,
			agent.Message{Role: "user", Content: fmt.Sprintf("message %d %s", pos, strings.Repeat("x", int(pos%200)))})
	}
	s.QueueSeq = tick
	for pos := tick; pos < tick+3; pos++ {
		s.EventQueueBackup = append(s.EventQueueBackup, agent.Event{
			Source: "test", Type: "task", Payload: json.RawMessage(fmt.Sprintf(`{"pos":%d}`, pos)), ID: fmt.Sprintf("e%d", pos)})
	}
	return s
}

func TestCrash(t *testing.T) {
	storagetest.RunCrash(t, storagetest.CrashHarness{Open: openStorage, Snapshot: crashSnapshot})
}

// TestSaveCostFlat checks, in pages written (bbolt's, meta pages included,
// and the journal's 4 KiB pages its records touch), that a Save costs about
// the same with a history of 10 messages and of 1,000.
func TestSaveCostFlat(t *testing.T) {
	pages := func(n int) float64 {
		s := mustOpen(t, t.TempDir(), Options{})
		w := newWindow("flat", n, 200)
		mustSave(t, s, w.snap)
		for i := 0; i < 50; i++ {
			mustSave(t, s, w.step())
		}
		db := agentDB(t, s, "flat")
		a, _ := s.agents.Get("flat")
		written := func() int64 {
			st := db.Stats()
			return st.TxStats.GetWrite() + a.jr.pages
		}
		before := written()
		const saves = 400 // several folds
		for i := 0; i < saves; i++ {
			mustSave(t, s, w.step())
		}
		return float64(written()-before) / saves
	}
	small, large := pages(10), pages(1000)
	t.Logf("pages written per Save (meta pages and the journal's included): %.2f at 10 messages, %.2f at 1,000", small, large)
	if large > 1.5*small {
		t.Fatalf("a Save writes %.2f pages at 1,000 messages and %.2f at 10", large, small)
	}
}

func TestRetention(t *testing.T) {
	result := func(seq uint64, ms int64) agent.Result {
		return agent.Result{Seq: seq, TaskID: fmt.Sprintf("t%03d", seq), AgentID: "ret", Status: agent.ResultDone, FinishedAt: ms}
	}
	found := func(t *testing.T, s *Store, seq uint64) bool {
		t.Helper()
		_, err := s.TaskResult(ctx, "ret", fmt.Sprintf("t%03d", seq))
		if err != nil && !errors.Is(err, plugin.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	t.Run("count", func(t *testing.T) {
		s := mustOpen(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: 5, MaxAgeMs: -1}})
		for seq := uint64(0); seq < 20; seq++ {
			snap := storagetest.Sample("ret", seq)
			snap.Outbox = []agent.Result{result(seq, 1000+int64(seq))}
			mustSave(t, s, snap)
		}
		for seq := uint64(0); seq < 20; seq++ {
			if want := seq >= 15; found(t, s, seq) != want {
				t.Errorf("task %d found = %v, want %v", seq, !want, want)
			}
		}
	})
	t.Run("age", func(t *testing.T) {
		s := mustOpen(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: -1, MaxAgeMs: 1000}})
		snap := storagetest.Sample("ret", 1)
		snap.Timestamp = 10_000
		snap.Outbox = []agent.Result{result(1, 8_000), result(2, 9_500)}
		mustSave(t, s, snap)
		if found(t, s, 1) || !found(t, s, 2) {
			t.Fatal("want task 1 pruned (2s old) and task 2 kept (0.5s old)")
		}
		snap.Timestamp = 11_000
		snap.Outbox = nil
		mustSave(t, s, snap)
		if found(t, s, 2) {
			t.Fatal("task 2 is 1.5s old and still indexed")
		}
	})
	t.Run("bounded per save", func(t *testing.T) {
		s := mustOpen(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: 1, MaxAgeMs: -1}})
		snap := storagetest.Sample("ret", 1)
		snap.Outbox = nil
		for seq := uint64(0); seq < 200; seq++ {
			snap.Outbox = append(snap.Outbox, result(seq, 1000))
		}
		mustSave(t, s, snap)
		count := func() uint64 {
			var n uint64
			if err := agentDB(t, s, "ret").View(func(tx *bolt.Tx) error {
				var err error
				n, err = taskCount(tx.Bucket(bucketTasks))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(); n != 200-pruneLimit {
			t.Fatalf("%d tasks indexed after one Save; want %d (200 less one Save's prune limit)", n, 200-pruneLimit)
		}
		snap.Outbox = nil
		for i := 0; i < 4; i++ {
			mustSave(t, s, snap)
		}
		if n := count(); n != 1 {
			t.Fatalf("%d tasks indexed; want 1", n)
		}
		if !found(t, s, 199) {
			t.Fatal("the newest task was pruned")
		}
	})
	t.Run("same task twice", func(t *testing.T) {
		s := mustOpen(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: 1, MaxAgeMs: -1}})
		snap := storagetest.Sample("ret", 1)
		first, second := result(1, 1000), result(2, 2000)
		second.TaskID = first.TaskID
		second.Status = agent.ResultFailed
		snap.Outbox = []agent.Result{first, second}
		mustSave(t, s, snap)
		got, err := s.TaskResult(ctx, "ret", first.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != 2 || got.Status != agent.ResultFailed {
			t.Fatalf("TaskResult = %+v; want the later result", got)
		}
	})
}

func TestOpenURL(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	env := plugin.Env{DataDir: filepath.Join(base, "data")}
	cases := []struct {
		url     string
		wantDir string
		wantErr bool
	}{
		{"bbolt://" + filepath.Join(base, "abs"), filepath.Join(base, "abs"), false},
		{"bbolt://rel/dir", filepath.Join(base, "rel", "dir"), false},
		{"bbolt://", filepath.Join(base, "data", "agents"), false},
		{"bbolt://" + filepath.Join(base, "x") + "?max_tasks=5&max_age=1h&lock_timeout=1s", filepath.Join(base, "x"), false},
		{"bbolt://" + base + "?nonsense=1", "", true},
		{"bbolt://" + base + "?max_tasks=many", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			st, err := plugin.OpenStorage(ctx, tc.url, env)
			if tc.wantErr {
				if err == nil {
					st.Close()
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			s := st.(*Store)
			if s.Dir() != tc.wantDir {
				t.Fatalf("dir = %s; want %s", s.Dir(), tc.wantDir)
			}
			if u, _ := url.Parse(tc.url); u.Query().Get("max_tasks") == "5" {
				if s.opts.Retention.MaxTasks != 5 || s.opts.Retention.MaxAgeMs != 3600_000 || s.opts.LockTimeout != time.Second {
					t.Fatalf("options = %+v", s.opts)
				}
			}
			mustSave(t, s, storagetest.Sample("u", 1))
			if _, err := os.Stat(filepath.Join(tc.wantDir, "u", FileName)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// window is a benchmark and test agent: a history of n messages of about
// size bytes that slides by two messages (one user, one assistant) a tick.
type window struct {
	snap *agent.Snapshot
	size int
}

func newWindow(id string, n, size int) *window {
	w := &window{snap: agent.New(id, 1_700_000_000_000), size: size}
	w.snap.Status = agent.StatusWaitingForEvent
	w.snap.Memory.WorkingVariables["user"] = "bench"
	for i := 0; i < n; i++ {
		w.snap.Memory.ShortTermHistory = append(w.snap.Memory.ShortTermHistory, w.message(uint64(i)))
	}
	return w
}

func (w *window) message(pos uint64) agent.Message {
	role := []string{"user", "assistant"}[pos%2]
	head := fmt.Sprintf("%s message %d: ", role, pos)
	return agent.Message{Role: role, Content: head + strings.Repeat("z", max(0, w.size-len(head)-30))}
}

// step advances a tick and returns the snapshot to save, sharing w's.
func (w *window) step() *agent.Snapshot {
	s := w.snap
	s.TickIndex++
	s.Timestamp += 1000
	end := s.HistorySeq + uint64(len(s.Memory.ShortTermHistory))
	s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, w.message(end), w.message(end+1))[2:]
	s.HistorySeq += 2
	return s
}
