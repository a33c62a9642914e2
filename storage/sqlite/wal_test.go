package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// crashCopy saves 20 generations and copies the files of the still open
// store, as a SIGKILL leaves them: every commit is in the WAL only.
func crashCopy(t *testing.T) (dst string, last *agent.Snapshot) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(ctx, dbPath(dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := storagetest.Sample("wal", 1)
	for i := 1; i <= 20; i++ {
		snap = snap.Clone()
		snap.TickIndex = uint64(i)
		snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: strings.Repeat("x", 3000)})
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	dst = t.TempDir()
	for _, name := range []string{"state.db", "state.db-wal", filepath.Join("state.db-gen", "wal")} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst, snap
}

// TestDamagedWAL: SQLite drops the WAL frames from the first damaged one
// on without a word. The store used to come up older, or blank, in silence;
// now it logs an error naming the ticks lost, or refuses.
func TestDamagedWAL(t *testing.T) {
	t.Run("cut", func(t *testing.T) {
		dir, last := crashCopy(t)
		wal := filepath.Join(dir, "state.db-wal")
		fi, err := os.Stat(wal)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(wal, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		var logs storagetest.LogBuffer
		s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.New(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := s.Load(ctx, "wal")
		if err != nil || got == nil {
			t.Fatalf("Load = %v, %v; want an older generation", got, err)
		}
		if got.TickIndex >= last.TickIndex {
			t.Fatalf("Load = tick %d; the cut WAL should have lost some of the %d", got.TickIndex, last.TickIndex)
		}
		if lines := logs.Lines("error", "went back"); len(lines) != 1 || !strings.Contains(lines[0], "saved tick 20") {
			t.Fatalf("no error naming what was lost:\n%s", logs.String())
		}
	})
	t.Run("header", func(t *testing.T) {
		dir, _ := crashCopy(t)
		wal := filepath.Join(dir, "state.db-wal")
		b, err := os.ReadFile(wal)
		if err != nil {
			t.Fatal(err)
		}
		b[20] ^= 0x40 // a salt: the whole WAL is ignored
		if err := os.WriteFile(wal, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s := openStore(t, dir, Options{})
		got, err := s.Load(ctx, "wal")
		if !errors.Is(err, plugin.ErrCorrupt) || !strings.Contains(err.Error(), dbPath(dir)) {
			t.Fatalf("Load = %v, %v; want ErrCorrupt naming the database", got != nil, err)
		}
	})
}
