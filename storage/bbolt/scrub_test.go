package bbolt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScrub: a scrub of a healthy agent finds nothing; a journal record
// damaged on the disk while the agent runs is found and repaired from the
// transaction that holds it (folded into state.db), so that a restart
// loads the newest state whole; a damaged value of state.db is found,
// named, and repaired: the file salvaged, the snapshot written whole from
// the agent's memory at its next save.
func TestScrub(t *testing.T) {
	dir := t.TempDir()
	s, saved := journaled(t, dir, "sc", 8)
	rep, err := s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 0 || rep.Bytes == 0 {
		t.Fatalf("healthy: %+v, %v; want no damage and bytes checked", rep, err)
	}

	// A bit of record 4 rots on the card while the agent runs.
	jpath := filepath.Join(dir, "sc", JournalName)
	b, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	off := records(b)[3]
	writeAt(t, jpath, int64(off+journalHeader+2), []byte{b[off+journalHeader+2] ^ 0x04})
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 1 || len(rep.Repaired) != 1 || !strings.Contains(rep.Damage[0], jpath) {
		t.Fatalf("damaged journal: %+v, %v; want one damage, repaired, naming %s", rep, err, jpath)
	}
	if rep, err = s.Scrub(ctx, "sc"); err != nil || len(rep.Damage) != 0 {
		t.Fatalf("after the repair: %+v, %v; want no damage", rep, err)
	}
	// A crash now: the damaged journal is no longer needed.
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "sc", nil), Options{}), saved[7])
	// The agent goes on.
	next := saved[7].Clone()
	next.TickIndex = 9
	mustSave(t, s, next)
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "sc", nil), Options{}), next)

	// A value of state.db rots: a history message's bytes.
	path := filepath.Join(dir, "sc", FileName)
	db, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(db, []byte("careful test agent"))
	if i < 0 {
		t.Fatal("no history message found in state.db")
	}
	writeAt(t, path, int64(i), []byte("CAREFUL"))
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) == 0 || !strings.Contains(rep.Damage[0], path) || len(rep.Repaired) != 1 {
		t.Fatalf("damaged state.db: %+v, %v; want damage naming %s, repaired", rep, err, path)
	}
	t.Logf("found: %s; %s", rep.Damage[0], rep.Repaired[0])
	// The file was salvaged without the damaged message; the agent's
	// next save writes its snapshot whole from memory, message included.
	after := next.Clone()
	after.TickIndex = 10
	mustSave(t, s, after)
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "sc", nil), Options{}), after)
	if rep, err = s.Scrub(ctx, "sc"); err != nil || len(rep.Damage) != 0 {
		t.Fatalf("after the repair: %+v, %v; want no damage", rep, err)
	}

	// An agent without a file: nothing to check.
	if rep, err := s.Scrub(ctx, "nobody"); err != nil || len(rep.Damage) != 0 || rep.Bytes != 0 {
		t.Fatalf("no file: %+v, %v", rep, err)
	}
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
