package bbolt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// metaRoot returns the root page of the meta page bbolt uses in the file
// b (the valid one with the higher txid).
func metaRoot(t *testing.T, b []byte) int {
	t.Helper()
	best, root := uint64(0), 0
	for _, off := range []int{0, 4096} {
		m := parseMeta(b[off:])
		if m.err == nil && m.txid >= best {
			best, root = m.txid, int(m.root)
		}
	}
	if root == 0 {
		t.Fatal("no valid meta page")
	}
	return root
}

// TestSalvageJournalMark: the root page holds the mark bucket, and in it
// the number of the last journal record state.db holds. With that page
// zeroed while the journal holds saves not folded yet (the agent was
// killed), the salvage takes the number from the journal's first record:
// every save comes back, at the newest tick.
func TestSalvageJournalMark(t *testing.T) {
	base := t.TempDir()
	s, saved := journaled(t, base, "jm", 40)
	// A copy while the store is open: what a SIGKILL leaves.
	dir := copyAgent(t, base, "jm", func(name string, b []byte) []byte {
		if name == FileName {
			root := metaRoot(t, b)
			clear(b[root*4096 : (root+1)*4096])
		}
		return b
	})
	s.Close()
	path := filepath.Join(dir, "jm", FileName)
	// The first save committed to bbolt, its small buckets inline in the
	// root page: its results were in the page zeroed. Every later one's
	// is in the journal.
	first := map[string]bool{}
	for _, id := range taskIDs(saved[:1]) {
		first[id] = true
	}
	var later []string
	for _, id := range taskIDs(saved) {
		if !first[id] {
			later = append(later, id)
		}
	}
	snap := mustSalvage(t, dir, "jm", path, saved[len(saved)-1].TickIndex, later)
	if len(snap.Memory.ShortTermHistory) != len(saved[len(saved)-1].Memory.ShortTermHistory) {
		t.Fatalf("history of %d messages; want %d", len(snap.Memory.ShortTermHistory), len(saved[len(saved)-1].Memory.ShortTermHistory))
	}
}

// TestSalvageLocked: a damaged file another process (here, another Store)
// holds is not salvaged under it: opening fails with ErrLocked.
func TestSalvageLocked(t *testing.T) {
	dir := t.TempDir()
	path, _ := damagedStore(t, dir, "busy", 3)
	unlock, err := lockFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	patch(t, path, func(b []byte) []byte { clear(b[:4096]); return b })
	before := fileSum(t, path)
	_, err, _ = loadDamaged(t, dir, "busy")
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("locked by another process")) {
		t.Fatalf("Load = %v; want the file locked", err)
	}
	if fileSum(t, path) != before {
		t.Fatal("the file changed under its lock")
	}
}

// FuzzSalvageFile: whatever bytes state.db holds, the salvage neither
// panics nor loads anything but a snapshot that was saved (less the
// elements damage took): it loads one, or refuses.
func FuzzSalvageFile(f *testing.F) {
	base := f.TempDir()
	s, saved := journaled(f, base, "fz", 12)
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(base, "fz", FileName))
	if err != nil {
		f.Fatal(err)
	}
	ticks := map[uint64]bool{}
	for _, sn := range saved {
		ticks[sn.TickIndex] = true
	}
	used := db[:min(len(db), 8*4096)]
	f.Add(used)
	f.Add(used[:len(used)/2])
	f.Add(append(make([]byte, 4096), used[4096:]...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "fz"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "fz", FileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		snap, err := s.Load(ctx, "fz")
		if err != nil || snap == nil {
			return
		}
		if !ticks[snap.TickIndex] {
			t.Fatalf("loaded tick %d, never saved", snap.TickIndex)
		}
		next := snap.Clone()
		next.TickIndex++
		next.Memory.ShortTermHistory = append(next.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "after"})
		if err := s.Save(ctx, next); err != nil {
			t.Fatalf("Save after the salvage: %v", err)
		}
	})
}
