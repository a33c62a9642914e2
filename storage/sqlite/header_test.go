package sqlite

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestDamagedFirstPage: page 1 of the database (its header and schema)
// zeroed or overwritten made SQLite refuse the file ("file is
// not a database", "malformed database schema"), though every row was on
// other pages or in the log. Now it is rewritten from the copy Open keeps,
// checked and rebuilt: every tick and result is back. Without the copy the
// database is refused and left as it was. (A file cut short inside page 1
// lost the pages after it too: the rewrite is tried, fails its check, and
// the file is put back and refused.)
func TestDamagedFirstPage(t *testing.T) {
	// (While the log holds page 1, SQLite reads it from there and damage
	// to the file's copy does not show: the database is checkpointed, by a
	// clean stop, before the damage.)
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		noCopy bool
		// later: saves after the clean stop, in the log when the store is
		// copied as a SIGKILL leaves it (as TestStoreDamage does).
		later bool
	}{
		{name: "zeroed", damage: func(b []byte) []byte { clear(b[:4096]); return b }},
		{name: "zeroed, later saves in the log", later: true, damage: func(b []byte) []byte { clear(b[:4096]); return b }},
		{name: "magic", damage: func(b []byte) []byte { copy(b, "0123456789abcdef"); return b }},
		{name: "schema", damage: func(b []byte) []byte { clear(b[100:400]); return b }},
		{name: "no copy", noCopy: true, damage: func(b []byte) []byte { clear(b[:4096]); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, last, tasks := resultsCrashCopy(t, 20)
			lastTick := last.TickIndex
			s0 := openStore(t, dir, Options{})
			if _, err := s0.Load(ctx, "res"); err != nil {
				t.Fatal(err)
			}
			if err := s0.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.later {
				dir, lastTick, tasks = saveMore(t, dir, last, tasks, 5)
			}
			path := dbPath(dir)
			if tc.noCopy {
				if err := os.Remove(page1Path(path)); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			before := fileSum(t, path)
			var logs storagetest.LogBuffer
			s, err := Open(ctx, path, Options{Logger: zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t)))})
			if tc.noCopy {
				if !errors.Is(err, plugin.ErrCorrupt) || fileSum(t, path) != before {
					t.Fatalf("Open without a copy = %v; want ErrCorrupt and the file left as it was", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			if len(logs.Lines("error", "was damaged: rewritten from the copy")) != 1 {
				t.Fatalf("no line saying the first page was rewritten:\n%s", &logs)
			}
			// The damaged file is kept (as it was, unless SQLite's failed
			// open checkpointed the log into it, which it does on closing).
			kept, _ := filepath.Glob(path + ".damaged-*")
			if len(kept) != 1 || !tc.later && fileSum(t, kept[0]) != before {
				t.Fatalf("the damaged file is not kept as it was: %v", kept)
			}
			got, err := s.Load(ctx, "res")
			if err != nil || got == nil || got.TickIndex != lastTick {
				t.Fatalf("Load = %v, %v; want tick %d", got, err, lastTick)
			}
			for _, id := range tasks {
				if _, err := s.TaskResult(ctx, "res", id); err != nil {
					t.Errorf("task %s: %v", id, err)
				}
			}
			if rep, err := s.Scrub(ctx, "res"); err != nil || len(rep.Damage) != 0 {
				t.Fatalf("scrub after the repair: %+v, %v", rep, err)
			}
		})
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// saveMore opens the store in dir, saves n more generations after last,
// each finishing one task, and copies the store's files while it is open.
func saveMore(t *testing.T, dir string, last *agent.Snapshot, tasks []string, n int) (string, uint64, []string) {
	t.Helper()
	s := openStore(t, dir, Options{})
	if _, err := s.Load(ctx, "res"); err != nil {
		t.Fatal(err)
	}
	snap := last
	for i := 0; i < n; i++ {
		snap = snap.Clone()
		snap.TickIndex++
		id := fmt.Sprintf("more%d", i)
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: id, AgentID: "res", Status: "done"})
		snap.NextResultSeq++
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, id)
	}
	dst := t.TempDir()
	storagetest.CopyDir(t, dir, dst)
	return dst, snap.TickIndex, tasks
}
