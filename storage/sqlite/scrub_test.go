package sqlite

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestScrub: a scrub of a healthy database and log finds nothing; a bit of
// a log frame in the middle, rotting while the store runs, is found before
// the next open would drop it with every commit after it, and, its page
// being in a later frame too, repaired by a checkpoint: a copy of the files
// (a crash) then loads the newest tick.
func TestScrub(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	snap := storagetest.Sample("sc", 1)
	for i := 1; i <= 10; i++ {
		snap = snap.Clone()
		snap.TickIndex = uint64(i)
		snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: strings.Repeat("y", 2000)})
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 0 || rep.Bytes == 0 {
		t.Fatalf("healthy: %+v, %v; want no damage and bytes checked", rep, err)
	}
	wal := filepath.Join(dir, "state.db-wal")
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	ps := int(binary.BigEndian.Uint32(b[8:]))
	if frames := (len(b) - 32) / (24 + ps); frames < 4 {
		t.Fatalf("%d frames in the log; want a few", frames)
	}
	off := int64(32 + 2*(24+ps) + 24 + 100) // the page of frame 2
	f, err := os.OpenFile(wal, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[off] ^ 0x01}, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 1 || !strings.Contains(rep.Damage[0], wal+": frame 2 ") {
		t.Fatalf("damaged log: %+v, %v; want frame 2 of %s named", rep, err, wal)
	}
	// Frame 2 holds a page that later frames hold too (every save rewrites
	// the agent's row and its records): the scrub checkpointed the log, so
	// that the damaged frame is gone and a crash now loses nothing.
	if len(rep.Repaired) != 1 {
		t.Fatalf("not repaired: %+v", rep)
	}
	if fi, err := os.Stat(wal); err != nil || fi.Size() != 0 {
		t.Fatalf("the log after the repair: %v, %v; want it empty", fi, err)
	}
	crash := t.TempDir()
	for _, name := range []string{"state.db", "state.db-wal", filepath.Join("state.db-gen", "sc")} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(crash, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crash, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := openStore(t, crash, Options{}).Load(ctx, "sc")
	if err != nil || got == nil || got.TickIndex != 10 {
		t.Fatalf("a copy after the repair: %v, %v; want tick 10", got, err)
	}
}

// TestWALDamage: sqlitedb.WALDamage on a log as SQLite wrote it, cut, with its last
// frame torn (what a crash leaves: not damage), a frame in the middle
// damaged, and its header damaged.
func TestWALDamage(t *testing.T) {
	dir, _ := crashCopy(t)
	good, err := os.ReadFile(filepath.Join(dir, "state.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	frame := 24 + int(binary.BigEndian.Uint32(good[8:]))
	n := (len(good) - 32) / frame
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"whole", func(b []byte) []byte { return b }, ""},
		{"empty", func(b []byte) []byte { return nil }, ""},
		{"cut in a frame", func(b []byte) []byte { return b[:32+frame*(n/2)+100] }, ""},
		{"last frame torn", func(b []byte) []byte { b[32+(n-1)*frame+50] ^= 1; return b }, ""},
		{"middle frame", func(b []byte) []byte { b[32+(n/2)*frame+50] ^= 1; return b }, "fails its checksum (1 damaged frames in all): SQLite will drop it"},
		{"header", func(b []byte) []byte { b[12] ^= 1; return b }, "its header fails its checksum"},
		{"magic", func(b []byte) []byte { b[0] = 0; return b }, "magic number"},
		{"header cut", func(b []byte) []byte { return b[:20] }, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sqlitedb.WALDamage(tc.edit(append([]byte(nil), good...)))
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("walDamage = %q; want %q", got, tc.want)
			}
		})
	}
}
