package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// resultsCrashCopy saves n generations of agent "res", each finishing one
// task, and copies the store's files while it is open, as a SIGKILL leaves
// them (every commit in the WAL only). It returns the copy, the last
// snapshot and the task ids.
func resultsCrashCopy(t *testing.T, n int) (string, *agent.Snapshot, []string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(ctx, dbPath(dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := storagetest.Sample("res", 1)
	var tasks []string
	for i := 1; i <= n; i++ {
		snap = snap.Clone()
		snap.TickIndex = uint64(i)
		snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: strings.Repeat("x", 3000)})
		id := fmt.Sprintf("task%d", i)
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: id, AgentID: "res", Status: "done", Output: []byte(`"ok"`)})
		snap.NextResultSeq++
		if len(snap.Outbox) > 3 {
			snap.Outbox = snap.Outbox[1:]
		}
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, id)
	}
	dst := t.TempDir()
	storagetest.CopyDir(t, dir, dst)
	return dst, snap, tasks
}

// TestDamagedWALKeepsResults: a damaged WAL frame costs SQLite its commit
// and every later one, and the results those commits indexed used to be
// lost with them (their tasks answered 404). The side record puts them
// back: the agent comes up older, said at error level, and every task
// acknowledged still answers done. A damaged record of the side record
// costs only its own result.
func TestDamagedWALKeepsResults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sideFlip bool
	}{{"wal", false}, {"wal and side record", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, last, tasks := resultsCrashCopy(t, 20)
			wal := filepath.Join(dir, "state.db-wal")
			fi, err := os.Stat(wal)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(wal, fi.Size()/3); err != nil {
				t.Fatal(err)
			}
			flipped := ""
			if tc.sideFlip {
				side := filepath.Join(dir, "state.db-gen", ".results-res")
				b, err := os.ReadFile(side)
				if err != nil {
					t.Fatal(err)
				}
				// One byte inside the JSON of the 15th result.
				i := strings.Index(string(b), `"task15"`)
				b[i+2] ^= 0x01
				if err := os.WriteFile(side, b, 0o600); err != nil {
					t.Fatal(err)
				}
				flipped = "task15"
			}
			var logs storagetest.LogBuffer
			s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t)))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.Load(ctx, "res")
			if err != nil || got == nil || got.TickIndex >= last.TickIndex {
				t.Fatalf("Load = %v, %v; want an older generation", got, err)
			}
			if len(logs.Lines("error", "went back")) != 1 || len(logs.Lines("warn", "from the side record")) != 1 {
				t.Fatalf("no lines saying what was lost and put back:\n%s", &logs)
			}
			for _, id := range tasks {
				r, err := s.TaskResult(ctx, "res", id)
				switch {
				case id == flipped && err == nil:
					t.Errorf("task %s: served, though its only copy beyond the lost commit was damaged", id)
				case id != flipped && (err != nil || r.Status != "done"):
					t.Errorf("task %s: %v, %v; want its result", id, r, err)
				}
			}
			// The agent goes on from the older tick; a restart keeps both.
			next := got.Clone()
			next.TickIndex++
			if err := s.Save(ctx, next); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openStore(t, dir, Options{})
			if g, err := s2.Load(ctx, "res"); err != nil || g.TickIndex != next.TickIndex {
				t.Fatalf("Load after the Save = %v, %v", g, err)
			}
			if _, err := s2.TaskResult(ctx, "res", "task20"); err != nil {
				t.Fatalf("task20 after a restart: %v", err)
			}
		})
	}
}

// FuzzSideResults: whatever the side record holds, reading it neither
// panics nor returns a result another generation committed.
func FuzzSideResults(f *testing.F) {
	s := &Store{path: filepath.Join(f.TempDir(), "state.db")}
	cur, _ := s.sidePaths("fz")
	if err := os.MkdirAll(filepath.Dir(cur), 0o700); err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		s.writeResults("fz", uint64(i+1), []*agent.Result{{Seq: uint64(i), TaskID: fmt.Sprintf("t%d", i), Status: "done"}})
	}
	s.writeResults("fz", 1, []*agent.Result{{TaskID: "a", Status: "done"}, {TaskID: "b", Status: "failed"}})
	buf, _ := os.ReadFile(cur)
	f.Add(buf, uint64(0))
	f.Add(buf[:len(buf)/2], uint64(1))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, gen uint64) {
		st := &Store{path: filepath.Join(t.TempDir(), "state.db")}
		cur, _ := st.sidePaths("fz")
		if err := os.MkdirAll(filepath.Dir(cur), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cur, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rs, _ := st.sideResults("fz", gen)
		for id, r := range rs {
			if r.TaskID != id {
				t.Fatalf("result of %q under %q", r.TaskID, id)
			}
		}
	})
}

// BenchmarkSaveTask: one Save per task, each indexing one new result (the
// kernel's save at the end of a tick), so that it counts the side record's
// append: ns/op is the latency of a durable Save.
func BenchmarkSaveTask(b *testing.B) {
	s, err := Open(ctx, filepath.Join(b.TempDir(), "state.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := storagetest.Sample("bench", 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap.TickIndex++
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: fmt.Sprintf("task%d", i), AgentID: "bench",
			Status: "done", Output: []byte(`"` + strings.Repeat("x", 100) + `"`)})
		snap.NextResultSeq++
		if len(snap.Outbox) > 2 {
			snap.Outbox = snap.Outbox[1:]
		}
		if err := s.Save(ctx, snap); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteResults: what the side record adds to a Save that indexed
// one result: one append, no fsync.
func BenchmarkWriteResults(b *testing.B) {
	s := &Store{path: filepath.Join(b.TempDir(), "state.db")}
	cur, _ := s.sidePaths("bench")
	if err := os.MkdirAll(filepath.Dir(cur), 0o700); err != nil {
		b.Fatal(err)
	}
	r := []*agent.Result{{Seq: 1, TaskID: "task1", AgentID: "bench", Status: "done", Output: []byte(`"` + strings.Repeat("x", 100) + `"`)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.writeResults("bench", uint64(i+1), r)
	}
}
