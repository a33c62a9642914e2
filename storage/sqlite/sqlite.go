package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	msqlite "modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
	"github.com/openstarry/openstarry-edge/storage/sqlite/internal/record"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "storage.sqlite",
		Description: "every agent in one SQLite database (pure Go, WAL, synchronous=FULL)",
		New:         plugin.StorageOpener(openURL),
	})
}

// The lists of a snapshot, as the elements.list column names them.
const (
	listHistory = 0 // Memory.ShortTermHistory
	listQueue   = 1 // EventQueueBackup
	listOutbox  = 2 // Outbox
	listRecent  = 3 // RecentEventIDs
)

// maxOpenConns bounds the pool; every connection holds its own page cache,
// which matters on a small board.
const maxOpenConns = 4

// dbOptions are the database's: foreign keys enforced, maxOpenConns.
var dbOptions = sqlitedb.Options{ForeignKeys: true, MaxOpenConns: maxOpenConns}

// Options configure a Store.
type Options struct {
	// Logger receives a warning for each damaged generation Load skips and
	// for a database SQLite could not put in WAL mode. The zero Logger
	// discards them.
	Logger zerolog.Logger

	// Retention bounds the task index of each agent. A zero field takes
	// the value of plugin.DefaultRetention; a negative one means no limit.
	Retention plugin.Retention

	// Now is the clock that stamps indexed results and ages them out.
	// Default time.Now.
	Now func() time.Time
}

// Store is the SQLite snapshot store. It is safe for concurrent use; calls for
// one agent are expected from that agent's single owner goroutine.
type Store struct {
	db   *sql.DB
	path string
	log  zerolog.Logger
	ret  plugin.Retention
	now  func() time.Time

	// wmu serialises this process's write transactions. SQLite admits one
	// writer at a time anyway; queueing here is cheaper than busy-waiting
	// in the driver, which is left for other processes.
	wmu sync.Mutex

	cache backend.Agents[cacheEntry] // per agent: where the newest generation's lists are; refused after Close
}

// cacheEntry is what the store remembers of an agent's newest generation,
// so that a Save can append to its lists instead of rewriting them.
type cacheEntry struct {
	gen     uint64
	history record.Span
	queue   record.Span
	// outbox and recent are nil for a generation of the first record
	// format, which kept the outbox and the recent ids inline.
	outbox, recent *record.Span
	// hist and events are shallow copies of the lists of generation gen
	// (their strings shared with the caller's snapshot), nil when unknown.
	// A Save appends to a list only when the elements it keeps compare
	// equal to these; comparing shared strings costs a pointer check each.
	hist    []agent.Message
	events  []agent.Event
	results []agent.Result
	ids     []string
	// lists is false when the entry knows where the lists are but not
	// what they hold (read from a record): the next Save writes both in
	// full.
	lists bool
	// damaged is set by a Load that had to skip the newest generation.
	// The rows a Save would append to may be the damaged ones, and the
	// good generation is an older one: the next Save writes its lists in
	// full and deletes nothing, and the Save after it cleans up.
	damaged bool
	// trimmed[list] is the key below which the list's rows are known to be
	// deleted (kept 0 when unknown: the next Save deletes at once). See
	// trimBatch.
	trimmed [4]int64
	known   [4]bool
	// indexed is what the Save that made the entry added to the task
	// index, until Save has copied it to the side record (results.go).
	indexed []*agent.Result
}

// trimBatch is how many rows of a list no kept generation needs a Save lets
// stand before it deletes them (at once while the list is shorter than
// that, so that a short list stays in one page), as storage/bbolt does. A
// delete at the front of a list rewrites the B-tree's first leaf and the
// pages above it (two page images in the WAL at a 1,000-message history:
// BenchmarkSave/window1000 measured 43.9 KiB a Save deleting each time,
// 41.0 KiB deleting 32 rows at a time and 36.3 KiB never deleting, while
// window10 stays at 29.1 KiB). Loads read a generation's rows by key
// range, so the rows below it are never read.
const trimBatch = 32

// newEntry returns the cache entry of the generation rec, whose lists are
// those of snap.
func newEntry(rec *record.Record, snap *agent.Snapshot) *cacheEntry {
	return &cacheEntry{
		gen: rec.Gen, history: rec.History, queue: rec.Queue, outbox: rec.Outbox, recent: rec.Recent, lists: true,
		hist:    slices.Clone(snap.Memory.ShortTermHistory),
		events:  slices.Clone(snap.EventQueueBackup),
		results: slices.Clone(snap.Outbox),
		ids:     slices.Clone(snap.RecentEventIDs),
	}
}

// openURL is the plugin opener: sqlite:///abs/state.db, sqlite://rel/state.db,
// or sqlite:// for {DataDir}/state.db. Query parameters: retention_tasks
// (a count) and retention_age (a Go duration such as 168h).
func openURL(ctx context.Context, u *url.URL, env plugin.Env) (plugin.Storage, error) {
	o := Options{Logger: env.Log}
	path, err := backend.PathURL(u, env, "state.db", &o.Retention)
	if err != nil {
		return nil, fmt.Errorf("sqlite: store url %s: %w", u.Redacted(), err)
	}
	return Open(ctx, path, o)
}

// Open opens, creating it if needed, the database at path and migrates its
// schema to this build's version.
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: open: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// The whole path made durable: a name on it lost in a power cut
	// would lose the database. SQLite makes the file's own name durable
	// (it fsyncs the directory when it creates the WAL).
	if err := atomicfile.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	if err := os.MkdirAll(markDir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	s, err := openDB(ctx, abs, o)
	if err == nil {
		s.keepPage1(ctx)
		return s, nil
	}
	if !errors.Is(err, plugin.ErrCorrupt) {
		return nil, err
	}
	// The first page is damaged: rewritten from its copy (header.go), by
	// one process at a time.
	unlock, lerr := lockPath(page1Path(abs) + ".lock")
	if lerr != nil {
		return nil, err
	}
	defer unlock()
	if s, err2 := openDB(ctx, abs, o); err2 == nil {
		return s, nil // another process repaired it
	}
	kept, rerr := restorePage1(abs)
	if kept == "" {
		if rerr != nil {
			o.Logger.Error().Str("path", abs).Err(rerr).Msg("sqlite: could not rewrite the database's damaged first page from its copy")
		}
		return nil, err
	}
	var s2 *Store
	if rerr == nil {
		if s2, rerr = openDB(ctx, abs, o); rerr == nil {
			if rerr = s2.checkRestored(ctx); rerr != nil {
				s2.db.Close()
			}
		}
	}
	if rerr != nil {
		if perr := os.Rename(kept, abs); perr != nil {
			rerr = fmt.Errorf("%v; putting the damaged file back: %v", rerr, perr)
		}
		o.Logger.Error().Str("path", abs).Err(rerr).Msg("sqlite: the database's damaged first page could not be rewritten from its copy; the database is left as it was")
		return nil, err
	}
	o.Logger.Error().Str("path", abs).Str("kept", kept).AnErr("damage", err).
		Msgf("sqlite: the database's first page (its header and schema) was damaged: rewritten from the copy kept in %s and checked; the damaged file is kept as %s",
			page1Path(abs), filepath.Base(kept))
	return s2, nil
}

// openDB opens the database at abs and migrates its schema.
func openDB(ctx context.Context, abs string, o Options) (*Store, error) {
	db, tightened, err := sqlitedb.Open(abs, dbOptions)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	for _, p := range tightened {
		o.Logger.Warn().Str("path", p).Msg("sqlite: the file was readable by other users; made private (0600)")
	}
	s := &Store{
		db:   db,
		path: abs,
		log:  o.Logger,
		ret:  backend.Retention(o.Retention),
		now:  o.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, corruptIf(err))
	}
	if !strings.EqualFold(mode, "wal") {
		s.log.Warn().Str("path", abs).Str("journal_mode", mode).
			Msg("sqlite: the database is not in WAL mode (is it on a network file system?); saves stay durable but slower")
	}
	if err := sqlitedb.Migrate(ctx, db, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, corruptIf(err))
	}
	return s, nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// corruptIf wraps err with plugin.ErrCorrupt when SQLite says the file is
// damaged or is not a database.
func corruptIf(err error) error {
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w", err, plugin.ErrCorrupt)
		}
	}
	return err
}

// failed returns err, or ErrClosed when the store was closed under the call.
func (s *Store) failed(err error) error {
	if s.cache.Closed() {
		return plugin.ErrClosed
	}
	return corruptIf(err)
}

// Save stores snap as the agent's newest generation, keeps the one before it,
// and indexes the new results of its outbox, in one transaction. It returns
// after that transaction is durable.
func (s *Store) Save(ctx context.Context, snap *agent.Snapshot) error {
	if err := backend.CheckSave(ctx, "sqlite", snap); err != nil {
		return err
	}
	id := snap.AgentID
	cached, err := s.cache.Get(id)
	if err != nil {
		return fmt.Errorf("sqlite: save %s: %w", id, err)
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: save %s: %w", id, s.failed(err))
	}
	next, err := s.save(ctx, tx, snap, cached)
	if err != nil {
		tx.Rollback() //nolint:errcheck // the save error is the one to report
		s.cache.Set(id, nil)
		return fmt.Errorf("sqlite: save %s: %w", id, s.failed(err))
	}
	// Commit point: COMMIT returns after the WAL is fsynced (synchronous=FULL).
	if err := tx.Commit(); err != nil {
		s.cache.Set(id, nil)
		return fmt.Errorf("sqlite: save %s: commit: %w", id, s.failed(err))
	}
	indexed := next.indexed
	next.indexed = nil
	s.cache.Set(id, next)
	s.writeMark(id, next.gen, snap.TickIndex)
	s.writeResults(id, next.gen, indexed)
	return nil
}

// save writes one generation inside tx and returns the cache entry that
// describes it.
func (s *Store) save(ctx context.Context, tx *sql.Tx, snap *agent.Snapshot, cached *cacheEntry) (*cacheEntry, error) {
	id := snap.AgentID
	var curGen, taskSeq uint64
	var taskCount int64
	err := tx.QueryRowContext(ctx, `SELECT gen, task_seq, task_count FROM agents WHERE agent_id = ?`, id).
		Scan(&curGen, &taskSeq, &taskCount)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	// The agents row is the pointer to the newest generation; MAX(gen)
	// covers a row lost to damage, so a new generation never collides.
	var maxGen uint64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(gen), 0) FROM generations WHERE agent_id = ?`, id).
		Scan(&maxGen); err != nil {
		return nil, err
	}
	curGen = max(curGen, maxGen)

	// prev describes generation curGen, the one this Save keeps as the
	// previous one; nil when there is none or its record is unreadable,
	// and then nothing is deleted. Its lists are appended to only when
	// prev.lists says they are known.
	var prev *cacheEntry
	switch {
	case curGen == 0:
	case cached != nil && cached.gen == curGen && cached.damaged:
	case cached != nil && cached.gen == curGen:
		prev = cached
	default:
		var blob []byte
		err := tx.QueryRowContext(ctx, `SELECT record FROM generations WHERE agent_id = ? AND gen = ?`, id, curGen).Scan(&blob)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		if r, _, derr := record.Decode(blob); err == nil && derr == nil {
			prev = &cacheEntry{gen: r.Gen, history: r.History, queue: r.Queue, outbox: r.Outbox, recent: r.Recent}
		}
	}
	var hPrev, qPrev, oPrev, rPrev *record.Span
	var hOld []agent.Message
	var qOld []agent.Event
	var oOld []agent.Result
	var rOld []string
	if prev != nil && prev.lists {
		hPrev, qPrev, hOld, qOld = &prev.history, &prev.queue, prev.hist, prev.events
		oPrev, rPrev, oOld, rOld = prev.outbox, prev.recent, prev.results, prev.ids
	}
	oSeq, ok := snap.OutboxSeq()
	if !ok {
		oPrev = nil // a hole in the numbering: written in full
	}

	h, q := snap.Memory.ShortTermHistory, snap.EventQueueBackup
	hSpan, err := writeList(ctx, tx, id, listHistory, hPrev, hOld, snap.HistorySeq, h, eqMessage)
	if err != nil {
		return nil, fmt.Errorf("short_term_history: %w", err)
	}
	qSpan, err := writeList(ctx, tx, id, listQueue, qPrev, qOld, snap.QueueSeq, q, eqEvent)
	if err != nil {
		return nil, fmt.Errorf("event_queue_backup: %w", err)
	}
	oSpan, err := writeList(ctx, tx, id, listOutbox, oPrev, oOld, oSeq, snap.Outbox, eqResult)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	rSpan, err := writeList(ctx, tx, id, listRecent, rPrev, rOld, snap.RecentSeq, snap.RecentEventIDs,
		func(a, b *string) bool { return *a == *b })
	if err != nil {
		return nil, fmt.Errorf("recent_event_ids: %w", err)
	}

	meta, err := record.MetaOf(snap)
	if err != nil {
		return nil, err
	}
	rec := &record.Record{Gen: curGen + 1, History: hSpan, Queue: qSpan, Outbox: &oSpan, Recent: &rSpan, Meta: meta}
	blob, err := record.Encode(rec)
	if err != nil {
		return nil, err
	}
	next := newEntry(rec, snap)
	if _, err := tx.ExecContext(ctx, `INSERT INTO generations (agent_id, gen, record) VALUES (?, ?, ?)`,
		id, next.gen, blob); err != nil {
		return nil, err
	}

	// Keep generation curGen and the new one; drop what only older ones
	// used. Spans only move forward (appends go past the end, rewrites
	// above every key in use), so "below prev's first key" is exactly the
	// rows no kept generation needs.
	var trimmed [4]int64
	var known [4]bool
	if prev != nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM generations WHERE agent_id = ? AND gen < ?`, id, prev.gen); err != nil {
			return nil, err
		}
		type drop struct {
			list int
			key  int64
		}
		drops := []drop{{listHistory, min(prev.history.Key, next.history.Key)}, {listQueue, min(prev.queue.Key, next.queue.Key)}}
		if prev.outbox != nil {
			// A generation of the first format has no rows of these lists.
			drops = append(drops, drop{listOutbox, min(prev.outbox.Key, next.outbox.Key)},
				drop{listRecent, min(prev.recent.Key, next.recent.Key)})
		}
		lens := [4]int64{hSpan.N, qSpan.N, oSpan.N, rSpan.N}
		for _, d := range drops {
			if prev.known[d.list] && d.key-prev.trimmed[d.list] < trimBatch && lens[d.list] >= trimBatch {
				trimmed[d.list], known[d.list] = prev.trimmed[d.list], true
				continue
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM elements WHERE agent_id = ? AND list = ? AND seq < ?`,
				id, d.list, d.key); err != nil {
				return nil, err
			}
			trimmed[d.list], known[d.list] = d.key, true
		}
	}
	next.trimmed, next.known = trimmed, known

	taskSeq, taskCount, next.indexed, err = s.index(ctx, tx, snap, taskSeq, taskCount)
	if err != nil {
		return nil, fmt.Errorf("task index: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO agents (agent_id, gen, task_seq, task_count) VALUES (?, ?, ?, ?)
		ON CONFLICT (agent_id) DO UPDATE SET gen = excluded.gen, task_seq = excluded.task_seq, task_count = excluded.task_count`,
		id, next.gen, taskSeq, taskCount); err != nil {
		return nil, err
	}
	return next, nil
}

// writeList stores the elements of one list (element i at absolute position
// seq+i) and returns the span that holds them. With prev and old, the span
// and the elements of the same list in the newest stored generation, it
// writes only the elements appended since, when the list is old with
// elements dropped from its front and appended at its back; otherwise it
// writes them all above every key in use, leaving prev's rows intact.
func writeList[T any](ctx context.Context, tx *sql.Tx, id string, list int, prev *record.Span, old []T, seq uint64, elems []T, eq func(a, b *T) bool) (record.Span, error) {
	n := len(elems)
	sp := record.Span{Seq: seq, N: int64(n)}
	from := 0
	incremental := false
	if prev != nil && int64(len(old)) == prev.N && seq >= prev.Seq && seq-prev.Seq <= uint64(prev.N) {
		dropped := int(seq - prev.Seq)
		overlap := len(old) - dropped // elements both generations hold
		if overlap <= n {
			incremental = true
			for i := 0; i < overlap; i++ {
				if !eq(&elems[i], &old[dropped+i]) {
					incremental = false
					break
				}
			}
		}
		if incremental {
			sp.Key = prev.Key + int64(dropped)
			from = overlap
			if overlap > 0 && from == n {
				sp.Last = prev.Last
			}
		}
	}
	if !incremental {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), -1) + 1 FROM elements WHERE agent_id = ? AND list = ?`,
			id, list).Scan(&sp.Key); err != nil {
			return record.Span{}, err
		}
	}
	if from == n {
		return sp, nil
	}
	const insert = `INSERT INTO elements (agent_id, list, seq, data) VALUES (?, ?, ?, ?)`
	exec := func(args ...any) error { _, err := tx.ExecContext(ctx, insert, args...); return err }
	if n-from > 4 {
		stmt, err := tx.PrepareContext(ctx, insert)
		if err != nil {
			return record.Span{}, err
		}
		defer stmt.Close()
		exec = func(args ...any) error { _, err := stmt.ExecContext(ctx, args...); return err }
	}
	for i := from; i < n; i++ {
		data, sum, err := record.EncodeElement(&elems[i])
		if err != nil {
			return record.Span{}, fmt.Errorf("element %d: %w", i, err)
		}
		if err := exec(id, list, sp.Key+int64(i), data); err != nil {
			return record.Span{}, err
		}
		sp.Last = sum
	}
	return sp, nil
}

func eqMessage(a, b *agent.Message) bool { return *a == *b }

// eqResult compares every field of agent.Result; TestEqResultCoversEveryField
// fails when the struct gains one.
func eqResult(a, b *agent.Result) bool {
	return a.Seq == b.Seq && a.TaskID == b.TaskID && a.AgentID == b.AgentID && a.Status == b.Status &&
		a.Error == b.Error && a.TickIndex == b.TickIndex && a.Source == b.Source && a.FinishedAt == b.FinishedAt &&
		bytes.Equal(a.Output, b.Output)
}

// eqEvent compares every field of agent.Event; TestEqEventCoversEveryField
// fails when the struct gains one.
func eqEvent(a, b *agent.Event) bool {
	return a.Source == b.Source && a.Type == b.Type && a.ID == b.ID && a.ReceivedAt == b.ReceivedAt &&
		bytes.Equal(a.Payload, b.Payload)
}

// index adds the outbox results above the mark taskSeq to the task index and
// prunes it, and returns the new mark and row count, and the results added.
func (s *Store) index(ctx context.Context, tx *sql.Tx, snap *agent.Snapshot, taskSeq uint64, count int64) (uint64, int64, []*agent.Result, error) {
	// The results above the mark, or the whole outbox of an agent restored
	// from an older generation (the index may hold results of its lost
	// future); see backend.Unindexed.
	results, mark := backend.Unindexed(snap, taskSeq)
	now := s.now().UnixMilli()
	for _, r := range results {
		data, _, err := record.EncodeElement(r)
		if err != nil {
			return 0, 0, nil, err
		}
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO tasks (agent_id, task_id, seq, indexed_at, result) VALUES (?, ?, ?, ?, ?)`,
			snap.AgentID, r.TaskID, r.Seq, now, data)
		if err != nil {
			return 0, 0, nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			count++
		} else if _, err := tx.ExecContext(ctx, `UPDATE tasks SET seq = ?, indexed_at = ?, result = ? WHERE agent_id = ? AND task_id = ?`,
			r.Seq, now, data, snap.AgentID, r.TaskID); err != nil {
			return 0, 0, nil, err
		}
	}

	p := backend.PruneFor(s.ret, now, len(results))
	if over := count - p.MaxTasks; p.MaxTasks >= 0 && over > 0 {
		res, err := tx.ExecContext(ctx, `DELETE FROM tasks WHERE rowid IN
			(SELECT rowid FROM tasks WHERE agent_id = ? ORDER BY seq LIMIT ?)`, snap.AgentID, min(over, p.Budget))
		if err != nil {
			return 0, 0, nil, err
		}
		n, _ := res.RowsAffected()
		count -= n
		p.Budget -= n
	}
	if p.Cutoff >= 0 && p.Budget > 0 {
		res, err := tx.ExecContext(ctx, `DELETE FROM tasks WHERE rowid IN
			(SELECT rowid FROM tasks WHERE agent_id = ? AND indexed_at < ? ORDER BY indexed_at LIMIT ?)`,
			snap.AgentID, p.Cutoff, p.Budget)
		if err != nil {
			return 0, 0, nil, err
		}
		n, _ := res.RowsAffected()
		count -= n
	}
	return mark, max(count, 0), results, nil
}

// stored is one generation row as Load reads it.
type stored struct {
	gen  uint64
	blob []byte
}

// Load returns the newest good generation of the agent. See the package
// documentation for what it does with damaged ones.
func (s *Store) Load(ctx context.Context, agentID string) (*agent.Snapshot, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("sqlite: load: %w", err)
	}
	if _, err := s.cache.Get(agentID); err != nil {
		return nil, fmt.Errorf("sqlite: load %s: %w", agentID, err)
	}
	snap, entry, newest, err := s.load(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: load %s: %w", agentID, s.failed(err))
	}
	m, merr := s.readMark(agentID)
	switch {
	case merr != nil:
		s.log.Warn().Str("agent", agentID).Err(merr).Msg("sqlite: the generation mark is unreadable; cannot tell whether the database went back")
	case m == nil:
	case snap == nil:
		return nil, fmt.Errorf("sqlite: load %s: %s holds nothing of the agent, but it saved generation %d (tick %d) at %s: "+
			"the database lost its newest writes (a damaged or missing write-ahead log, %s-wal): %w",
			agentID, s.path, m.gen, m.tick, m.when(), s.path, plugin.ErrCorrupt)
	case newest < m.gen:
		s.log.Error().Str("agent", agentID).Str("path", s.path).Uint64("generation", newest).Uint64("saved_generation", m.gen).
			Uint64("tick", snap.TickIndex).Uint64("saved_tick", m.tick).
			Msgf("sqlite: the database went back: agent %s saved tick %d (generation %d) at %s, the database holds tick %d (generation %d); "+
				"the ticks after %d are lost, with any task accepted in them (a damaged write-ahead log, %s-wal)",
				agentID, m.tick, m.gen, m.when(), snap.TickIndex, newest, snap.TickIndex, s.path)
		side, _ := s.sidePaths(agentID)
		switch n, bad, err := s.restoreResults(ctx, agentID, newest); {
		case err != nil:
			s.log.Error().Str("agent", agentID).Str("file", side).Err(err).
				Msg("sqlite: could not put back the results of the lost ticks from the side record")
		case n > 0 || bad > 0:
			s.log.Warn().Str("agent", agentID).Str("file", side).Int("restored", n).Int("damaged", bad).
				Msgf("sqlite: put back %d results of the lost ticks from the side record (%d of its records damaged): their tasks answer as before the damage",
					n, bad)
		}
	}
	s.cache.Set(agentID, entry)
	return snap, nil
}

func (s *Store) load(ctx context.Context, id string) (*agent.Snapshot, *cacheEntry, uint64, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, nil, 0, err
	}
	defer tx.Rollback() //nolint:errcheck // read only

	var newest uint64
	hasAgent := true
	if err := tx.QueryRowContext(ctx, `SELECT gen FROM agents WHERE agent_id = ?`, id).Scan(&newest); err != nil {
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, nil, 0, err
		}
		hasAgent = false
	}
	rows, err := tx.QueryContext(ctx, `SELECT gen, record FROM generations WHERE agent_id = ? ORDER BY gen DESC`, id)
	if err != nil {
		return nil, nil, 0, err
	}
	var gens []stored
	for rows.Next() {
		var g stored
		if err := rows.Scan(&g.gen, &g.blob); err != nil {
			rows.Close()
			return nil, nil, 0, err
		}
		gens = append(gens, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, 0, err
	}
	if len(gens) == 0 {
		if hasAgent {
			return nil, nil, 0, fmt.Errorf("generation %d is listed but no record is stored: %w", newest, plugin.ErrCorrupt)
		}
		return nil, nil, 0, nil
	}
	newest = max(newest, gens[0].gen)

	var problems []string
	for _, g := range gens {
		snap, rec, err := loadGeneration(ctx, tx, id, g)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, 0, ctx.Err()
			}
			problems = append(problems, fmt.Sprintf("generation %d: %v", g.gen, err))
			s.log.Warn().Str("agent", id).Uint64("gen", g.gen).Str("path", s.path).Err(err).
				Msg("sqlite: stored generation is damaged, trying the previous one")
			continue
		}
		e := newEntry(rec, snap)
		if g.gen != newest || len(problems) > 0 {
			s.log.Warn().Str("agent", id).Uint64("gen", g.gen).Uint64("newest", newest).Str("path", s.path).
				Msg("sqlite: loaded an older generation; the newest one is damaged or missing")
			e = &cacheEntry{gen: newest, damaged: true}
		}
		return snap, e, newest, nil
	}
	return nil, nil, 0, fmt.Errorf("no good generation (%s): %w", strings.Join(problems, "; "), plugin.ErrCorrupt)
}

// loadGeneration decodes one generation record and reads its elements.
func loadGeneration(ctx context.Context, tx *sql.Tx, id string, g stored) (*agent.Snapshot, *record.Record, error) {
	rec, snap, err := record.Decode(g.blob)
	if err != nil {
		return nil, nil, err
	}
	if rec.Gen != g.gen {
		return nil, nil, fmt.Errorf("record says generation %d: %w", rec.Gen, record.ErrChecksum)
	}
	if snap.AgentID != id {
		return nil, nil, fmt.Errorf("record is of agent %q: %w", snap.AgentID, record.ErrChecksum)
	}
	if snap.Memory.ShortTermHistory != nil {
		h := make([]agent.Message, rec.History.N)
		if err := readList(ctx, tx, id, listHistory, rec.History, func(i int) any { return &h[i] }); err != nil {
			return nil, nil, fmt.Errorf("short_term_history: %w", err)
		}
		snap.Memory.ShortTermHistory = h
	}
	if snap.EventQueueBackup != nil {
		q := make([]agent.Event, rec.Queue.N)
		if err := readList(ctx, tx, id, listQueue, rec.Queue, func(i int) any { return &q[i] }); err != nil {
			return nil, nil, fmt.Errorf("event_queue_backup: %w", err)
		}
		snap.EventQueueBackup = q
	}
	if rec.Outbox != nil {
		if rec.Outbox.N > 0 {
			o := make([]agent.Result, rec.Outbox.N)
			if err := readList(ctx, tx, id, listOutbox, *rec.Outbox, func(i int) any { return &o[i] }); err != nil {
				return nil, nil, fmt.Errorf("outbox: %w", err)
			}
			snap.Outbox = o
		}
		if rec.Recent.N > 0 {
			ids := make([]string, rec.Recent.N)
			if err := readList(ctx, tx, id, listRecent, *rec.Recent, func(i int) any { return &ids[i] }); err != nil {
				return nil, nil, fmt.Errorf("recent_event_ids: %w", err)
			}
			snap.RecentEventIDs = ids
		}
		snap.RecentSeq = rec.Recent.Seq
	}
	snap.HistorySeq = rec.History.Seq
	snap.QueueSeq = rec.Queue.Seq
	if err := snap.Validate(); err != nil {
		return nil, nil, err
	}
	return snap, rec, nil
}

// readList reads the elements of sp into at(0) .. at(sp.N-1), checking each
// checksum, that no key is missing, and the last element's checksum.
func readList(ctx context.Context, tx *sql.Tx, id string, list int, sp record.Span, at func(int) any) error {
	if sp.N == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, data FROM elements WHERE agent_id = ? AND list = ? AND seq >= ? AND seq < ? ORDER BY seq`,
		id, list, sp.Key, sp.End())
	if err != nil {
		return err
	}
	defer rows.Close()
	var i int64
	var sum uint32
	for rows.Next() {
		var key int64
		var data []byte
		if err := rows.Scan(&key, &data); err != nil {
			return err
		}
		if key != sp.Key+i {
			return fmt.Errorf("element %d is missing: %w", sp.Key+i, record.ErrChecksum)
		}
		if sum, err = record.DecodeElement(data, at(int(i))); err != nil {
			return fmt.Errorf("element %d: %w", key, err)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if i != sp.N {
		return fmt.Errorf("%d of %d elements stored: %w", i, sp.N, record.ErrChecksum)
	}
	if sum != sp.Last {
		return fmt.Errorf("last element is not the one saved: %w", record.ErrChecksum)
	}
	return nil
}

// Delete removes every generation, element and indexed result of the agent.
func (s *Store) Delete(ctx context.Context, agentID string) error {
	if err := agent.ValidateID(agentID); err != nil {
		return fmt.Errorf("sqlite: delete: %w", err)
	}
	if _, err := s.cache.Get(agentID); err != nil {
		return fmt.Errorf("sqlite: delete %s: %w", agentID, err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		for _, table := range []string{"agents", "generations", "elements", "tasks"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE agent_id = ?`, agentID); err != nil {
				return err
			}
		}
		return tx.Commit()
	}()
	s.cache.Set(agentID, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete %s: %w", agentID, s.failed(err))
	}
	if err := os.Remove(s.markPath(agentID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sqlite: delete %s: %w", agentID, err)
	}
	if err := s.removeResults(agentID); err != nil {
		return fmt.Errorf("sqlite: delete %s: %w", agentID, err)
	}
	return nil
}

// List returns the ids of every stored agent, sorted.
func (s *Store) List(ctx context.Context) ([]string, error) {
	if s.cache.Closed() {
		return nil, fmt.Errorf("sqlite: list: %w", plugin.ErrClosed)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT agent_id FROM agents UNION SELECT agent_id FROM generations ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", s.failed(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", s.failed(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", s.failed(err))
	}
	return ids, nil
}

// TaskResult returns the indexed result of a task of the agent.
func (s *Store) TaskResult(ctx context.Context, agentID, taskID string) (*agent.Result, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("sqlite: task result: %w", err)
	}
	if _, err := s.cache.Get(agentID); err != nil {
		return nil, fmt.Errorf("sqlite: task result %s/%s: %w", agentID, taskID, err)
	}
	var data []byte
	err := s.db.QueryRowContext(ctx, `SELECT result FROM tasks WHERE agent_id = ? AND task_id = ?`, agentID, taskID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: task result %s/%s: %w", agentID, taskID, plugin.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: task result %s/%s: %w", agentID, taskID, s.failed(err))
	}
	var r agent.Result
	if _, err := record.DecodeElement(data, &r); err != nil {
		return nil, fmt.Errorf("sqlite: task result %s/%s: %v: %w", agentID, taskID, err, plugin.ErrCorrupt)
	}
	return &r, nil
}

// Close closes the database. The last connection to close checkpoints the
// WAL into the database file. Closing twice is not an error.
func (s *Store) Close() error {
	if _, first := s.cache.Close(); !first {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// Interface guards.
var (
	_ plugin.Storage   = (*Store)(nil)
	_ plugin.TaskIndex = (*Store)(nil)
	_ plugin.Lister    = (*Store)(nil)
)
