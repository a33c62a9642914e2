package bbolt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// journaled saves n generations of agent id (ticks 1..n), each with one
// more message and one more finished result, on a store that stays open
// until the test ends, and returns the store and the snapshots saved. The
// first Save commits to bbolt, the others go to the journal.
func journaled(tb testing.TB, dir, id string, n int) (*Store, []*agent.Snapshot) {
	tb.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	var saved []*agent.Snapshot
	snap := storagetest.Sample(id, 1)
	for i := 0; i < n; i++ {
		snap = snap.Clone()
		snap.TickIndex = uint64(i + 1)
		snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "m"})
		seq := snap.NextResultSeq
		snap.NextResultSeq++
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: seq, TaskID: fmt.Sprintf("task%d", i), AgentID: id, Status: "done"})
		if err := s.Save(ctx, snap); err != nil {
			tb.Fatal(err)
		}
		saved = append(saved, snap)
	}
	return s, saved
}

// copyAgent copies the files of agent id in dir, as a machine that stops
// dead leaves them, to a new directory, changed by edit (nil: as they
// are), and returns that directory.
func copyAgent(t *testing.T, dir, id string, edit func(name string, b []byte) []byte) string {
	t.Helper()
	to := t.TempDir()
	if err := os.MkdirAll(filepath.Join(to, id), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName, JournalName} {
		b, err := os.ReadFile(filepath.Join(dir, id, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			b = edit(name, b)
		}
		if err := os.WriteFile(filepath.Join(to, id, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// records returns the offsets of the good records of a journal, from 0.
func records(b []byte) []int {
	var offs []int
	for off := 0; ; {
		_, n, _, ok := recordAt(b, off)
		if !ok {
			return offs
		}
		offs = append(offs, off)
		off += n
	}
}

// TestJournalSavesOnePage: Saves that continue one another go to the
// journal, not to bbolt, and each touches one or two of its pages.
func TestJournalSavesOnePage(t *testing.T) {
	dir := t.TempDir()
	s, saved := journaled(t, dir, "j", 1)
	db := agentDB(t, s, "j")
	written := func() int64 { st := db.Stats(); return st.TxStats.GetWrite() }
	commits := written()
	a, _ := s.agents.Get("j")
	snap := saved[0]
	for i := 0; i < 20; i++ {
		snap = snap.Clone()
		snap.TickIndex++
		mustSave(t, s, snap)
	}
	if w := written(); w != commits {
		t.Errorf("20 Saves wrote %d pages of state.db, want none (all in the journal)", w-commits)
	}
	if a.jr.pages < 20 || a.jr.pages > 40 {
		t.Errorf("20 Saves touched %d pages of the journal, want 20 to 40", a.jr.pages)
	}
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "j", nil), Options{}), snap)
}

// TestJournalFolds: Saves past the journal's size are folded into state.db
// and the journal starts again at its beginning; a stop at any point loads
// the last Save.
func TestJournalFolds(t *testing.T) {
	dir := t.TempDir()
	small := Options{tune: func(tu *tuning) { tu.journalSize = 8 << 10 }}
	s := mustOpen(t, dir, small)
	w := newWindow("fold", 40, 300)
	mustSave(t, s, w.snap)
	a, _ := s.agents.Get("fold")
	folds := 0
	for i := 0; i < 200; i++ {
		off := a.jr.off
		snap := w.step()
		mustSave(t, s, snap)
		if a.jr.off < off {
			folds++
		}
		if i%37 == 0 {
			checkLoad(t, mustOpen(t, copyAgent(t, dir, "fold", nil), small), snap)
		}
	}
	if folds < 5 {
		t.Fatalf("%d folds in 200 Saves of an 8 KiB journal", folds)
	}
	last := w.snap
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean Close folds: state.db alone holds the last Save.
	to := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "fold", FileName))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(to, "fold"), 0o700)
	if err := os.WriteFile(filepath.Join(to, "fold", FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	checkLoad(t, mustOpen(t, to, Options{}), last)
}

// TestJournalTornRecord: a last record cut short or damaged, as a power
// cut in the middle of a Save leaves it, is not replayed: the Save before it
// loads, with a warning when the record's header is there to say a record
// was being written, and the next Save overwrites it. A journal file cut
// short says so too.
func TestJournalTornRecord(t *testing.T) {
	warnings := map[string]string{
		"cut":       "the journal's record 5 does not check",
		"flipped":   "the journal's record 5 does not check",
		"zeroed":    "",
		"truncated": "the journal is cut short",
	}
	for _, how := range []string{"cut", "flipped", "zeroed", "truncated"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			_, saved := journaled(t, dir, "torn", 6)
			to := copyAgent(t, dir, "torn", func(name string, b []byte) []byte {
				if name != JournalName {
					return b
				}
				offs := records(b)
				if len(offs) != 5 {
					t.Fatalf("%d records in the journal, want 5", len(offs))
				}
				last := offs[len(offs)-1]
				_, n, _, _ := recordAt(b, last)
				switch how {
				case "cut":
					clear(b[last+n/2 : last+n])
				case "flipped":
					b[last+n-3] ^= 0x10
				case "zeroed":
					clear(b[last : last+journalHeader])
				default:
					b = b[:last+n/2]
				}
				return b
			})
			got, err, logs := loadDamaged(t, to, "torn")
			if err != nil || encode(t, got) != encode(t, saved[4]) {
				t.Fatalf("Load = %v; want tick 5", err)
			}
			warned := logs.Lines("warn", "journal")
			if w := warnings[how]; w == "" && len(warned) > 0 || w != "" && (len(warned) != 1 || !strings.Contains(warned[0], w)) {
				t.Fatalf("warnings %q, want %q", warned, w)
			}
			s2 := mustOpen(t, to, Options{})
			checkLoad(t, s2, saved[4])
			next := saved[4].Clone()
			next.TickIndex = 99
			mustSave(t, s2, next)
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, mustOpen(t, copyAgent(t, to, "torn", nil), Options{}), next)
		})
	}
}

// TestJournalDamagedMiddle: a record damaged with good ones after it loses
// that record's Save only: the reader resyncs on the records after it and
// replays them, the newest generation loads without the message and the
// result the lost record added, said at error level, the results of the
// records after the damage are served, and the records written after that
// are numbered above every one in the file, so that none comes back.
func TestJournalDamagedMiddle(t *testing.T) {
	dir := t.TempDir()
	_, saved := journaled(t, dir, "mid", 8)
	to := copyAgent(t, dir, "mid", func(name string, b []byte) []byte {
		if name == JournalName {
			off := records(b)[3] // the record of tick 5
			b[off+journalHeader+2] ^= 0x01
		}
		return b
	})
	snap, err, logs := loadDamaged(t, to, "mid")
	if err != nil {
		t.Fatal(err)
	}
	if snap.TickIndex != 8 {
		t.Fatalf("loaded tick %d, want 8 (the newest: only the record of tick 5 is damaged)", snap.TickIndex)
	}
	// What tick 5 added is gone; everything else of tick 8 is there.
	want := saved[7].Clone()
	want.Memory.ShortTermHistory = slices.Delete(want.Memory.ShortTermHistory, 5+4, 5+5)
	want.Outbox = slices.Delete(want.Outbox, 2+4, 2+5)
	if g, w := encode(t, snap), encode(t, want); g != w {
		t.Fatalf("loaded\n%s\nwant tick 8 without the message and the result of tick 5\n%s", g, w)
	}
	if l := logs.Lines("error", "the journal is damaged at record 4: 1 saves are lost (records 4 to 4); the 3 records after the damage are replayed"); len(l) != 1 {
		t.Fatalf("no error line about the lost save:\n%s", logs)
	}
	if l := logs.Lines("error", "1 history messages, 0 queued events, 1 undelivered results"); len(l) != 1 {
		t.Fatalf("no error line about what the generation lost:\n%s", logs)
	}
	s := mustOpen(t, to, Options{})
	for i, ok := range []bool{true, true, true, true, false, true, true, true} {
		_, err := s.TaskResult(ctx, "mid", fmt.Sprintf("task%d", i))
		if ok && err != nil || !ok && !errors.Is(err, plugin.ErrNotFound) {
			t.Errorf("task%d: %v; want found: %v", i, err, ok)
		}
	}
	// The agent goes on from tick 8; its next Saves must win over the lost
	// record after a crash too.
	next, err := s.Load(ctx, "mid")
	if err != nil {
		t.Fatal(err)
	}
	for tick := uint64(10); tick < 13; tick++ {
		next = next.Clone()
		next.TickIndex = tick
		next.Memory.ShortTermHistory = append(next.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "n"})
		mustSave(t, s, next)
	}
	checkLoad(t, mustOpen(t, copyAgent(t, to, "mid", nil), Options{}), next)
}

// TestJournalMarkDamaged: a damaged journal mark in state.db loads the
// agent from state.db alone, with an error line; the journal is not
// replayed on a guess.
func TestJournalMarkDamaged(t *testing.T) {
	dir := t.TempDir()
	s, saved := journaled(t, dir, "mark", 3)
	agentDB(t, s, "mark") // folds: state.db holds tick 3
	mustSave(t, s, saved[2].Clone())
	to := copyAgent(t, dir, "mark", nil)
	db, err := bolt.Open(filepath.Join(to, "mark", FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		v := append([]byte(nil), tx.Bucket(bucketMark).Get(keyFolded)...)
		v[len(v)-1] ^= 0x04
		return tx.Bucket(bucketMark).Put(keyFolded, v)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	snap, err, logs := loadDamaged(t, to, "mark")
	if err != nil || snap.TickIndex != 3 {
		t.Fatalf("Load = %v, %v; want tick 3", snap, err)
	}
	if len(logs.Lines("error", "the journal's mark in the store is damaged")) != 1 {
		t.Fatalf("no error line about the mark:\n%s", logs)
	}
}

// TestJournalOfDeletedAgent: an agent deleted and saved again never gets
// the journal of the one before, even when a crash left that journal.
func TestJournalOfDeletedAgent(t *testing.T) {
	dir := t.TempDir()
	s, _ := journaled(t, dir, "again", 5)
	old, err := os.ReadFile(filepath.Join(dir, "again", JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "again", JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the journal outlived Delete: %v", err)
	}
	// A crash between the removal of state.db and that of the journal.
	os.MkdirAll(filepath.Join(dir, "again"), 0o700)
	if err := os.WriteFile(filepath.Join(dir, "again", JournalName), old, 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := storagetest.Sample("again", 1)
	fresh.TickIndex = 1
	mustSave(t, s, fresh)
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "again", nil), Options{}), fresh)
}

// TestJournalSymlinkRefused: a journal that is a symlink is not followed.
func TestJournalSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	s, _ := journaled(t, dir, "link", 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	jp := filepath.Join(dir, "link", JournalName)
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(jp, target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, jp); err != nil {
		t.Fatal(err)
	}
	_, err, _ := loadDamaged(t, dir, "link")
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Load = %v; want a refusal of the symlink", err)
	}
}

// FuzzJournal: the journal's decoders (recordAt, eachOp) on any bytes
// neither panic nor pass on an operation bbolt would refuse.
func FuzzJournal(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendRecord(nil, 1, nil))
	var l opLog
	l.add(opPut, 's', []byte("x"), []byte("y"))
	l.add(opDelete, 't', []byte("k"), nil)
	l.add(opCreate, 'm', bucketMark, nil)
	f.Add(appendRecord(nil, 1, l.b))
	f.Add(binary.BigEndian.AppendUint64(make([]byte, 8), 1))
	f.Fuzz(func(t *testing.T, journal []byte) {
		for off := 0; off <= len(journal); off++ {
			ops, n, _, ok := recordAt(journal, off)
			if ok && (n < journalHeader || len(ops) != n-journalHeader) {
				t.Fatalf("record at %d: %d bytes, %d of operations", off, n, len(ops))
			}
			if ok {
				_ = eachOp(ops, func(kind byte, bucket, k, v []byte) error {
					if bucket == nil || (kind != opCreate && len(k) == 0) {
						t.Fatalf("eachOp passed a bad operation %q %q %q", kind, bucket, k)
					}
					return nil
				})
			}
		}
	})
}

// TestJournalAfterUpgrade: a file of a version without the journal has no
// journal mark; its first Save commits to bbolt and writes the mark, so that
// the journaled Saves after it are replayed after a crash.
func TestJournalAfterUpgrade(t *testing.T) {
	dir := t.TempDir()
	storagetest.Gunzip(t, filepath.Join("testdata", "v1-state.db.gz"), filepath.Join(dir, "v1agent", FileName))
	s := mustOpen(t, dir, Options{})
	snap, err := s.Load(ctx, "v1agent")
	if err != nil || snap == nil {
		t.Fatalf("Load = %v, %v", snap, err)
	}
	for tick := uint64(20); tick < 24; tick++ {
		snap = snap.Clone()
		snap.TickIndex = tick
		mustSave(t, s, snap)
	}
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "v1agent", nil), Options{}), snap)
}

// TestJournalDamagedEnd: damage where the journal ends, with no good record
// after it, cannot say how many Saves it took, but it is told from the
// place the next record goes, and said: a page of zeros (a new journal is
// filled with 0xff), or a last record whose number is damaged.
func TestJournalDamagedEnd(t *testing.T) {
	for _, tc := range []struct {
		name, warning string
		damage        func(b []byte, last int)
	}{
		{"zeroed page", "page of zeros", func(b []byte, last int) {
			p := last / journalPage * journalPage
			clear(b[p : p+journalPage])
		}},
		{"number flipped", "record 5 does not check", func(b []byte, last int) { b[last+15] ^= 0x02 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, saved := journaled(t, dir, "end", 6)
			to := copyAgent(t, dir, "end", func(name string, b []byte) []byte {
				if name == JournalName {
					offs := records(b)
					tc.damage(b, offs[len(offs)-1])
				}
				return b
			})
			got, err, logs := loadDamaged(t, to, "end")
			if err != nil || got.TickIndex >= saved[5].TickIndex {
				t.Fatalf("Load = %v, %v; want a tick before %d", got, err, saved[5].TickIndex)
			}
			if l := logs.Lines("warn", tc.warning); len(l) != 1 {
				t.Fatalf("no warning %q:\n%s", tc.warning, logs)
			}
		})
	}
}

// FuzzJournalFile: whatever the journal beside a good state.db holds,
// opening the store and loading the agent neither panics nor loads anything
// but a snapshot that was saved, and a Save after it loads again.
func FuzzJournalFile(f *testing.F) {
	base := f.TempDir()
	s, saved := journaled(f, base, "fz", 6)
	db, err := os.ReadFile(filepath.Join(base, "fz", FileName))
	if err != nil {
		f.Fatal(err)
	}
	journal, err := os.ReadFile(filepath.Join(base, "fz", JournalName))
	if err != nil {
		f.Fatal(err)
	}
	s.Close()
	encoded := map[string]bool{}
	for _, sn := range saved {
		js, _ := agent.Encode(sn)
		encoded[string(js)] = true
	}
	end := records(journal)
	used := journal[:end[len(end)-1]+1024]
	f.Add(used)
	f.Add(used[:len(used)/2])
	f.Add(append(append([]byte(nil), used[:100]...), make([]byte, 4096)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, head []byte) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "fz"), 0o700)
		j := append(append([]byte(nil), head...), journal[min(len(head), len(journal)):]...)
		if err := os.WriteFile(filepath.Join(dir, "fz", FileName), db, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "fz", JournalName), j, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := s.Load(ctx, "fz")
		if err != nil {
			return // refused: a clear error is an answer
		}
		if got == nil {
			t.Fatal("a store that was saved to loaded as a new agent")
		}
		js, _ := agent.Encode(got)
		if !encoded[string(js)] && !partOf(got, saved) {
			t.Fatalf("loaded a snapshot that was never saved (tick %d)", got.TickIndex)
		}
		next := got.Clone()
		next.TickIndex = 99
		if err := s.Save(ctx, next); err != nil {
			t.Fatal(err)
		}
		if again, err := s.Load(ctx, "fz"); err != nil || again.TickIndex != 99 {
			t.Fatalf("after a Save: %v, %v", again, err)
		}
	})
}

// partOf reports whether got is one of saved with elements left out of its
// lists (what the journal's lost records held), and nothing else changed.
func partOf(got *agent.Snapshot, saved []*agent.Snapshot) bool {
	for _, sn := range saved {
		if sn.TickIndex != got.TickIndex {
			continue
		}
		w := sn.Clone()
		if !subsequence(got.Memory.ShortTermHistory, w.Memory.ShortTermHistory) ||
			!subsequence(got.EventQueueBackup, w.EventQueueBackup) ||
			!subsequence(got.Outbox, w.Outbox) || !subsequence(got.RecentEventIDs, w.RecentEventIDs) {
			continue
		}
		w.Memory.ShortTermHistory, w.EventQueueBackup, w.Outbox, w.RecentEventIDs =
			got.Memory.ShortTermHistory, got.EventQueueBackup, got.Outbox, got.RecentEventIDs
		a, _ := agent.Encode(w)
		b, _ := agent.Encode(got)
		if string(a) == string(b) {
			return true
		}
	}
	return false
}

// subsequence reports whether the encoding of every element of sub is that
// of an element of list, in order.
func subsequence[T any](sub, list []T) bool {
	i := 0
	for _, e := range sub {
		je, _ := json.Marshal(e)
		for {
			if i == len(list) {
				return false
			}
			jl, _ := json.Marshal(list[i])
			i++
			if string(je) == string(jl) {
				break
			}
		}
	}
	return true
}

// TestJournalLargeSaveFolds: a Save whose operations outgrow the journal (a
// burst of tasks made durable at once) is folded into state.db without
// collecting its operations past the journal's size, and leaves the journal
// to the Saves after it; a stop after either loads what was saved.
func TestJournalLargeSaveFolds(t *testing.T) {
	dir := t.TempDir()
	small := Options{tune: func(tu *tuning) { tu.journalSize = 8 << 10 }}
	s := mustOpen(t, dir, small)
	snap := storagetest.Sample("big", 1)
	mustSave(t, s, snap)
	a, _ := s.agents.Get("big")
	db := agentDB(t, s, "big")
	written := func() int64 { st := db.Stats(); return st.TxStats.GetWrite() }

	// 64 KiB of new messages: eight times the journal.
	snap = snap.Clone()
	snap.TickIndex++
	for i := range 64 {
		snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory,
			agent.Message{Role: "user", Content: strings.Repeat(fmt.Sprint(i%10), 1024)})
	}
	before, off := written(), a.jr.off
	mustSave(t, s, snap)
	if written() == before {
		t.Fatal("a Save larger than the journal did not commit to state.db")
	}
	if a.jr.off > off {
		t.Fatalf("a Save larger than the journal went to it (offset %d → %d)", off, a.jr.off)
	}
	if !a.log.over || len(a.log.b) != 0 || int64(cap(a.log.b)) > 2*(8<<10) {
		t.Errorf("operations buffer after a large Save: over %v, %d bytes, capacity %d; want over, empty, at most twice the journal",
			a.log.over, len(a.log.b), cap(a.log.b))
	}
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "big", nil), small), snap)

	// The next Save is small: it goes to the journal.
	snap = snap.Clone()
	snap.TickIndex++
	snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "small"})
	before, off = written(), a.jr.off
	mustSave(t, s, snap)
	if written() != before || a.jr.off <= off {
		t.Fatalf("a small Save after a large one: %d pages of state.db, journal offset %d → %d; want the journal",
			written()-before, off, a.jr.off)
	}
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "big", nil), small), snap)
}

// TestOpLogLimit: the operations of a Save are logged up to the journal's
// limit exactly (an operation that ends at the limit is in, one past it
// makes the Save fold), and the buffer never grows past the limit, so the
// next Save of a burst reuses it instead of growing one afresh.
func TestOpLogLimit(t *testing.T) {
	const limit = 100 * 102
	v := make([]byte, 97) // an operation of 2+1+1+1+97 = 102 bytes with a 1-byte key
	l := &opLog{limit: limit}
	for range 100 {
		l.add(opPut, 1, []byte{'k'}, v)
		if l.over {
			t.Fatalf("over at %d bytes of a limit of %d", len(l.b), limit)
		}
	}
	if len(l.b) != limit {
		t.Fatalf("%d bytes logged, want %d: the last operation ends at the limit", len(l.b), limit)
	}
	if cap(l.b) > limit {
		t.Fatalf("the buffer grew to %d bytes, past the limit of %d", cap(l.b), limit)
	}
	l.add(opDelete, 1, []byte{'k'}, nil)
	if !l.over || len(l.b) != 0 {
		t.Fatalf("an operation past the limit: over %v, %d bytes", l.over, len(l.b))
	}
	if cap(l.b) == 0 {
		t.Fatal("the buffer was dropped; the next Save would grow it again")
	}
}
