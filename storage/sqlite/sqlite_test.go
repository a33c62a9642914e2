package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

var ctx = context.Background()

func dbPath(dir string) string { return filepath.Join(dir, "state.db") }

func openStore(t *testing.T, dir string, o Options) *Store {
	t.Helper()
	o.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s, err := Open(ctx, dbPath(dir), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawDB opens the database file of a closed store directly.
func rawDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitedb.DSN(dbPath(dir), dbOptions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// flipRecords flips bytes in the middle of the generation records of
// agentID: the newest only, or all of them.
func flipRecords(t *testing.T, dir, agentID string, all bool) {
	t.Helper()
	db := rawDB(t, dir)
	q := `SELECT gen, record FROM generations WHERE agent_id = ? ORDER BY gen DESC`
	if !all {
		q += ` LIMIT 1`
	}
	rows, err := db.Query(q, agentID)
	if err != nil {
		t.Fatal(err)
	}
	var gens []stored
	for rows.Next() {
		var g stored
		if err := rows.Scan(&g.gen, &g.blob); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	rows.Close()
	if len(gens) == 0 {
		t.Fatalf("no generation of %s to corrupt", agentID)
	}
	for _, g := range gens {
		g.blob[len(g.blob)/2] ^= 0x5a
		g.blob[len(g.blob)/2+1] ^= 0xff
		if _, err := db.Exec(`UPDATE generations SET record = ? WHERE agent_id = ? AND gen = ?`, g.blob, agentID, g.gen); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func harness() storagetest.Harness {
	return storagetest.Harness{
		Open: func(t *testing.T, dir string) plugin.Storage {
			s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		},
		CorruptLatest: func(t *testing.T, dir, agentID string) { flipRecords(t, dir, agentID, false) },
		CorruptAll:    func(t *testing.T, dir, agentID string) { flipRecords(t, dir, agentID, true) },
		Files:         func(dir, agentID string) []string { return []string{dbPath(dir)} },
		TryOpen: func(t *testing.T, dir string) (plugin.Storage, error) {
			return Open(ctx, dbPath(dir), Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
		},
	}
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, harness())
}

// TestCrash kills a saving child with SIGKILL at random points: every time,
// the store must load the last acknowledged tick or the one in flight,
// exactly as it was saved, seqs included. See storagetest.RunCrash.
func TestCrash(t *testing.T) {
	storagetest.RunCrash(t, storagetest.CrashHarness{Open: harness().Open, Equal: mustEqual})
}

// BenchmarkSave is storagetest.BenchmarkSave: the latency of a durable Save
// (median and 99th percentile) and the bytes written per Save (the WAL, its
// checkpoints, everything).
func BenchmarkSave(b *testing.B) {
	storagetest.BenchmarkSave(b, func(b *testing.B, dir string) plugin.Storage {
		s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}

// window plays the kernel's sliding history: each step appends add messages
// and drops the oldest beyond size.
type window struct {
	snap *agent.Snapshot
	size int
	pad  string // appended to every message
}

func newWindow(id string, size int) *window {
	s := agent.New(id, 1_700_000_000_000)
	s.Status = agent.StatusWaitingForEvent
	return &window{snap: s, size: size}
}

func (w *window) step(add int) *agent.Snapshot {
	s := w.snap
	s.TickIndex++
	for i := 0; i < add; i++ {
		pos := s.HistorySeq + uint64(len(s.Memory.ShortTermHistory))
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory,
			agent.Message{Role: "user", Content: fmt.Sprintf("message %d%s", pos, w.pad)})
	}
	if drop := len(s.Memory.ShortTermHistory) - w.size; drop > 0 {
		s.Memory.ShortTermHistory = s.Memory.ShortTermHistory[drop:]
		s.HistorySeq += uint64(drop)
	}
	c := s.Clone()
	if c.EventQueueBackup == nil {
		c.EventQueueBackup = []agent.Event{}
	}
	return c
}

// mustEqual is storagetest.MustEqual and equal seqs, which this store keeps.
func mustEqual(t *testing.T, got, want *agent.Snapshot) {
	t.Helper()
	storagetest.MustEqual(t, got, want)
	if got.HistorySeq != want.HistorySeq || got.QueueSeq != want.QueueSeq || got.RecentSeq != want.RecentSeq {
		t.Fatalf("seqs = %d/%d/%d, want %d/%d/%d", got.HistorySeq, got.QueueSeq, got.RecentSeq,
			want.HistorySeq, want.QueueSeq, want.RecentSeq)
	}
}

func count(t *testing.T, s *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSaveWritesOnlyTheChange checks that a sliding window costs what
// changed: two inserts per list per Save, and no more rows kept than two
// generations need.
func TestSaveWritesOnlyTheChange(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	w := newWindow("slider", 100)
	for i := 0; i < 60; i++ {
		if err := s.Save(ctx, w.step(2)); err != nil {
			t.Fatal(err)
		}
	}
	before := count(t, s, `SELECT MAX(seq) FROM elements WHERE agent_id = 'slider' AND list = 0`)
	for i := 0; i < 10; i++ {
		if err := s.Save(ctx, w.step(2)); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(t, s, `SELECT MAX(seq) FROM elements WHERE agent_id = 'slider' AND list = 0`); after != before+20 {
		t.Fatalf("10 saves of 2 new messages moved the last key from %d to %d, want +20 (a full rewrite happened)", before, after)
	}
	// The window of 100, the 2 only the previous generation has, and
	// fewer than trimBatch rows no generation needs, deleted in batches.
	rows := func() int64 { return count(t, s, `SELECT COUNT(*) FROM elements WHERE agent_id = 'slider'`) }
	if n := rows(); n < 102 || n >= 102+trimBatch {
		t.Fatalf("%d element rows kept, want 102 (window of 100 plus the 2 only the previous generation has) to %d", n, 102+trimBatch-1)
	}
	for i, fell := 0, false; !fell; i++ {
		if i == trimBatch/2+1 {
			t.Fatalf("%d saves of 2 messages and the rows no generation needs are still there", i)
		}
		was := rows()
		if err := s.Save(ctx, w.step(2)); err != nil {
			t.Fatal(err)
		}
		before += 2
		n := rows()
		if n >= 102+trimBatch {
			t.Fatalf("%d element rows kept, want fewer than %d", n, 102+trimBatch)
		}
		fell = n < was
	}
	if n := count(t, s, `SELECT COUNT(*) FROM generations WHERE agent_id = 'slider'`); n != 2 {
		t.Fatalf("%d generations kept, want 2", n)
	}
	// A Save that changes nothing in the lists writes no element.
	snap := w.step(0)
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT MAX(seq) FROM elements WHERE agent_id = 'slider' AND list = 0`); n != before+20 {
		t.Fatalf("an unchanged history moved the last key to %d", n)
	}
	got, err := s.Load(ctx, "slider")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, got, snap)
}

// TestRandomEdits checks Save against a model under random appends, drops,
// rewrites, replacements, nil lists and restarts.
func TestRandomEdits(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	snap := agent.New("random", 1)
	snap.Status = agent.StatusThinking
	var next uint64
	msg := func() agent.Message {
		next++
		return agent.Message{Role: "user", Content: fmt.Sprintf("m%d-%d", next, rng.IntN(1000))}
	}
	evt := func() agent.Event {
		next++
		return agent.Event{Source: "mqtt", Type: "task", ID: fmt.Sprint(next), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, next))}
	}
	for i := 0; i < 500; i++ {
		snap = snap.Clone()
		snap.TickIndex++
		h := snap.Memory.ShortTermHistory
		switch op := rng.IntN(25); {
		case op < 10: // append and drop, as the kernel does
			for n := rng.IntN(4); n > 0; n-- {
				h = append(h, msg())
			}
			if d := rng.IntN(3); d <= len(h) {
				h = h[d:]
				snap.HistorySeq += uint64(d)
			}
		case op < 12: // an element changes in place
			if len(h) > 0 {
				h[rng.IntN(len(h))] = msg()
			}
		case op < 14: // replaced, with an arbitrary seq
			h = nil
			for n := rng.IntN(6); n > 0; n-- {
				h = append(h, msg())
			}
			snap.HistorySeq = uint64(rng.IntN(50))
		case op < 15:
			h = nil
		case op < 16: // cut at the back
			h = h[:len(h)/2]
		case op < 18: // the queue moves
			q := snap.EventQueueBackup
			q = append(q, evt())
			if len(q) > 2 {
				q = q[1:]
				snap.QueueSeq++
			}
			snap.EventQueueBackup = q
		case op < 19: // restart
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, Options{})
		case op < 20: // jump ahead
			snap.HistorySeq += 1000
		case op < 23: // results arrive and are confirmed, mostly in order
			if snap.NextResultSeq == 0 {
				snap.NextResultSeq = 1
			}
			for n := rng.IntN(3); n > 0; n-- {
				next++
				snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: fmt.Sprint(next),
					AgentID: "random", Status: agent.ResultDone, Output: json.RawMessage(fmt.Sprintf(`"r%d"`, next))})
				snap.NextResultSeq++
			}
			if o := snap.Outbox; len(o) > 0 {
				i := 0
				if rng.IntN(4) == 0 {
					i = rng.IntN(len(o)) // out of order: a hole
				}
				snap.Outbox = append(o[:i:i], o[i+1:]...)
			}
		default: // recent event ids slide
			for n := 1 + rng.IntN(3); n > 0; n-- {
				next++
				snap.RecentEventIDs = append(snap.RecentEventIDs, fmt.Sprint(next))
			}
			if d := rng.IntN(len(snap.RecentEventIDs)/2 + 1); d > 0 {
				snap.RecentEventIDs = snap.RecentEventIDs[d:]
				snap.RecentSeq += uint64(d)
			}
		}
		snap.Memory.ShortTermHistory = h
		if err := s.Save(ctx, snap); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, err := s.Load(ctx, "random")
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		mustEqual(t, got, snap)
	}
}

// TestDamagedElement flips bytes in the element only the newest generation
// holds: Load must fall back to the previous generation, warn, and the next
// Save must not build on the damaged row.
func TestDamagedElement(t *testing.T) {
	dir := t.TempDir()
	var logs storagetest.LogBuffer
	logger := zerolog.New(&logs)
	s, err := Open(ctx, dbPath(dir), Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	w := newWindow("elem", 10)
	var prev, last *agent.Snapshot
	for i := 0; i < 15; i++ {
		prev, last = last, w.step(1)
		if err := s.Save(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db := rawDB(t, dir)
	var key int64
	var data []byte
	if err := db.QueryRow(`SELECT seq, data FROM elements WHERE agent_id = 'elem' AND list = 0 ORDER BY seq DESC LIMIT 1`).
		Scan(&key, &data); err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("message"), []byte("massage"), 1)
	if _, err := db.Exec(`UPDATE elements SET data = ? WHERE agent_id = 'elem' AND list = 0 AND seq = ?`, data, key); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = Open(ctx, dbPath(dir), Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Load(ctx, "elem")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, got, prev)
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "checksum mismatch") {
		t.Errorf("no warning naming the checksum mismatch in the log:\n%s", logs.String())
	}

	// The kernel goes on from prev and happens to append the very message
	// that was damaged: it must be written afresh.
	w.snap = got.Clone()
	again := w.step(1)
	if err := s.Save(ctx, again); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openStore(t, dir, Options{})
	got, err = s.Load(ctx, "elem")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, got, again)
}

// TestDamagedPages overwrites, in turn, the middle of every page of a
// checkpointed database file. Whatever is hit, opening and loading either
// fails with an error or returns one of the snapshots that were saved;
// never a blank agent, never a mix.
func TestDamagedPages(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	w := newWindow("paged", 300)
	w.pad = strings.Repeat(" padding", 25)
	saved := map[string]bool{}
	for i := 0; i < 40; i++ {
		snap := w.step(3)
		snap.Memory.WorkingVariables["pad"] = strings.Repeat("x", 1500)
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
		js, _ := agent.Encode(snap)
		saved[string(js)] = true
	}
	if _, err := s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	var pageSize int
	if err := s.db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pristine, err := os.ReadFile(dbPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	pages := len(pristine) / pageSize
	if pages < 10 {
		t.Fatalf("only %d pages; the test needs a bigger database", pages)
	}
	garbage := bytes.Repeat([]byte{0xa5, 0x00, 0xff, 0x3c}, 64)
	var loaded, failed int
	for p := 0; p < pages; p++ {
		d := t.TempDir()
		damaged := bytes.Clone(pristine)
		copy(damaged[p*pageSize+pageSize/2:], garbage)
		if err := os.WriteFile(dbPath(d), damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := Open(ctx, dbPath(d), Options{})
		if err != nil {
			t.Logf("page %d damaged: Open: %v", p, err)
			failed++
			continue
		}
		got, err := st.Load(ctx, "paged")
		st.Close()
		switch {
		case err != nil:
			t.Logf("page %d damaged: Load: %v", p, err)
			failed++
		case got == nil:
			t.Errorf("page %d damaged: Load returned nil, nil: a blank agent", p)
		default:
			js, _ := agent.Encode(got)
			if !saved[string(js)] {
				t.Errorf("page %d damaged: Load returned a snapshot that was never saved (tick %d)", p, got.TickIndex)
			}
			loaded++
		}
	}
	t.Logf("%d pages damaged one at a time: %d loads gave a saved snapshot, %d gave an error", pages, loaded, failed)
}

func TestCorruptErrorsWrapErrCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dbPath(dir), bytes.Repeat([]byte("not a database "), 400), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, dbPath(dir), Options{})
	if !errors.Is(err, plugin.ErrCorrupt) || !strings.Contains(err.Error(), dbPath(dir)) {
		t.Fatalf("Open of a file that is not a database: %v; want an error naming it and wrapping ErrCorrupt", err)
	}
}

func TestMigrations(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	if n := count(t, s, `PRAGMA user_version`); n != int64(len(migrations)) {
		t.Fatalf("user_version %d, want %d", n, len(migrations))
	}
	snap := storagetest.Sample("migrated", 1)
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// A later build adds a migration: it runs once, data stays.
	later := append(append([][]string{}, migrations...), []string{`CREATE TABLE later (x INTEGER)`})
	db := rawDB(t, dir)
	for i := 0; i < 2; i++ {
		if err := sqlitedb.Migrate(ctx, db, later); err != nil {
			t.Fatalf("migrate, round %d: %v", i, err)
		}
	}
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != len(later) {
		t.Fatalf("user_version %d (%v), want %d", v, err, len(later))
	}
	db.Close()

	// This build refuses the newer database instead of guessing.
	if _, err := Open(ctx, dbPath(dir), Options{}); err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("Open of a newer schema: %v; want a refusal", err)
	}
}

func TestPragmas(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	for _, tc := range []struct {
		pragma string
		want   string
	}{{"journal_mode", "wal"}, {"synchronous", "2"}, {"busy_timeout", "5000"}, {"foreign_keys", "1"}} {
		// Several connections at once, so that more than one is asked.
		var wg sync.WaitGroup
		for i := 0; i < maxOpenConns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback()
				var got string
				if err := tx.QueryRow(`PRAGMA ` + tc.pragma).Scan(&got); err != nil {
					t.Error(err)
					return
				}
				if got != tc.want {
					t.Errorf("PRAGMA %s = %s, want %s", tc.pragma, got, tc.want)
				}
				time.Sleep(10 * time.Millisecond)
			}()
		}
		wg.Wait()
	}
}

func TestOpenURL(t *testing.T) {
	data := t.TempDir()
	env := plugin.Env{DataDir: data, Log: zerolog.New(zerolog.NewTestWriter(t))}
	for _, tc := range []struct{ url, file string }{
		{"sqlite://", filepath.Join(data, "state.db")},
		{"sqlite://" + filepath.Join(data, "abs", "x.db"), filepath.Join(data, "abs", "x.db")},
		{"sqlite://" + filepath.Join(data, "r.db") + "?retention_tasks=5&retention_age=1h", filepath.Join(data, "r.db")},
	} {
		st, err := plugin.OpenStorage(ctx, tc.url, env)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := st.(*Store).Path(); got != tc.file {
			t.Errorf("%s opened %s, want %s", tc.url, got, tc.file)
		}
		st.Close()
	}
	t.Run("relative", func(t *testing.T) {
		t.Chdir(data)
		st, err := plugin.OpenStorage(ctx, "sqlite://rel/path.db", env)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := os.Stat(filepath.Join(data, "rel", "path.db")); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := plugin.OpenStorage(ctx, "sqlite:///tmp/x.db?retention=1", env); err == nil || !strings.Contains(err.Error(), "unknown parameter") {
		t.Fatalf("unknown parameter: %v", err)
	}
	st, err := plugin.OpenStorage(ctx, "sqlite://"+filepath.Join(data, "r.db")+"?retention_tasks=5&retention_age=1h", env)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r := st.(*Store).ret; r.MaxTasks != 5 || r.MaxAgeMs != 3600_000 {
		t.Fatalf("retention %+v from the URL", r)
	}
}

func result(id string, seq uint64) agent.Result {
	return agent.Result{Seq: seq, TaskID: fmt.Sprintf("t%d", seq), AgentID: id, Status: agent.ResultDone,
		Output: json.RawMessage(fmt.Sprintf(`"out %d"`, seq)), TickIndex: seq}
}

func TestTaskRetention(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	clock := func() time.Time { return now }
	s := openStore(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: 50, MaxAgeMs: 3600_000}, Now: clock})
	snap := agent.New("ret", 1)
	var seq uint64
	for i := 0; i < 200; i++ {
		snap.TickIndex++
		seq++
		snap.Outbox = []agent.Result{result("ret", seq)}
		snap.NextResultSeq = seq + 1
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, s, `SELECT COUNT(*) FROM tasks WHERE agent_id = 'ret'`); n != 50 {
		t.Fatalf("%d results kept, want 50", n)
	}
	if n := count(t, s, `SELECT task_count FROM agents WHERE agent_id = 'ret'`); n != 50 {
		t.Fatalf("task_count %d, want 50", n)
	}
	if _, err := s.TaskResult(ctx, "ret", "t150"); !errors.Is(err, plugin.ErrNotFound) {
		t.Fatalf("t150 should have been pruned: %v", err)
	}
	if r, err := s.TaskResult(ctx, "ret", "t200"); err != nil || string(r.Output) != `"out 200"` {
		t.Fatalf("t200: %v %v", r, err)
	}

	// Two hours later every old result is past its age.
	now = now.Add(2 * time.Hour)
	snap.Outbox = nil
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT COUNT(*) FROM tasks WHERE agent_id = 'ret'`); n != 0 {
		t.Fatalf("%d results older than the retention age kept", n)
	}

	// The agent goes back to an older generation and replays results whose
	// seqs were indexed already: they are indexed again.
	snap.Outbox = []agent.Result{result("ret", 150)}
	snap.Outbox[0].Output = json.RawMessage(`"replayed"`)
	snap.NextResultSeq = 151
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if r, err := s.TaskResult(ctx, "ret", "t150"); err != nil || string(r.Output) != `"replayed"` {
		t.Fatalf("replayed t150: %v %v", r, err)
	}
}

func TestPruneIsBounded(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{Retention: plugin.Retention{MaxTasks: 1000}})
	snap := agent.New("bulk", 1)
	for i := uint64(1); i <= 500; i++ {
		snap.Outbox = append(snap.Outbox, result("bulk", i))
	}
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	s.ret.MaxTasks = 10
	snap.Outbox = nil
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT COUNT(*) FROM tasks WHERE agent_id = 'bulk'`); n != 500-backend.PruneBatch {
		t.Fatalf("one Save pruned to %d rows, want %d (a bounded batch)", n, 500-backend.PruneBatch)
	}
}

func TestEqResultCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[agent.Result]().NumField(); n != 9 {
		t.Fatalf("agent.Result has %d fields; eqResult compares 9: update it", n)
	}
}

// TestOutboxWritesOnlyTheChange: with 2,000 results waiting for the hub, a
// Save that adds one result writes one outbox row, not 2,001.
func TestOutboxWritesOnlyTheChange(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	snap := agent.New("backlog", 1)
	snap.NextResultSeq = 1
	add := func() {
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: fmt.Sprintf("t%d", snap.NextResultSeq),
			AgentID: "backlog", Status: agent.ResultDone, Output: json.RawMessage(`"` + strings.Repeat("o", 900) + `"`)})
		snap.RecentEventIDs = append(snap.RecentEventIDs, fmt.Sprintf("t%d", snap.NextResultSeq))
		snap.NextResultSeq++
	}
	for range 2000 {
		add()
	}
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	maxKey := func(list int) int64 {
		return count(t, s, fmt.Sprintf(`SELECT MAX(seq) FROM elements WHERE agent_id = 'backlog' AND list = %d`, list))
	}
	outBefore, idsBefore := maxKey(listOutbox), maxKey(listRecent)
	for range 10 {
		snap.TickIndex++
		add()
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	if got := maxKey(listOutbox); got != outBefore+10 {
		t.Fatalf("10 saves of one new result moved the last outbox key from %d to %d, want +10", outBefore, got)
	}
	if got := maxKey(listRecent); got != idsBefore+10 {
		t.Fatalf("10 saves of one new id moved the last key from %d to %d, want +10", idsBefore, got)
	}
	// Confirmed from the front: the rows go, nothing is rewritten.
	snap.Outbox = snap.Outbox[5:]
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if got := maxKey(listOutbox); got != outBefore+10 {
		t.Fatalf("confirming moved the last outbox key to %d", got)
	}
	got, err := s.Load(ctx, "backlog")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, got, snap)
}

// TestFirstFormatDatabase loads a database written by the version that kept
// the outbox and the recent event ids inline in the generation record
// (testdata/v1-state.db.gz), saves over it twice and loads again.
func TestFirstFormatDatabase(t *testing.T) {
	dir := t.TempDir()
	storagetest.Gunzip(t, filepath.Join("testdata", "v1-state.db.gz"), dbPath(dir))
	s := openStore(t, dir, Options{})
	got, err := s.Load(ctx, "v1agent")
	if err != nil || got == nil {
		t.Fatalf("Load = %v, %v", got, err)
	}
	if len(got.Outbox) != 2 || got.Outbox[1].TaskID != "t2" || len(got.RecentEventIDs) != 3 ||
		len(got.EventQueueBackup) != 1 || len(got.Memory.ShortTermHistory) != 2 || got.NextResultSeq != 3 {
		js, _ := agent.Encode(got)
		t.Fatalf("first-format snapshot loaded as %s", js)
	}
	next := got.Clone()
	next.Outbox = append(next.Outbox[1:], agent.Result{Seq: 3, TaskID: "t3", AgentID: "v1agent", Status: agent.ResultDone, TickIndex: 8})
	next.NextResultSeq, next.TickIndex = 4, 8
	next.EventQueueBackup = next.EventQueueBackup[1:]
	next.QueueSeq++
	next.RecentEventIDs = append(next.RecentEventIDs, "t4")
	for range 2 {
		next = next.Clone()
		next.TickIndex++
		if err := s.Save(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := openStore(t, dir, Options{})
	loaded, err := again.Load(ctx, "v1agent")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, loaded, next)
}

func TestEqEventCoversEveryField(t *testing.T) {
	// The stored fields: an unexported one (the decoded task the tick
	// reuses) is never written, so eqEvent does not compare it.
	typ, n := reflect.TypeFor[agent.Event](), 0
	for i := range typ.NumField() {
		if typ.Field(i).IsExported() {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("agent.Event has %d exported fields; eqEvent compares 5: update it", n)
	}
}
