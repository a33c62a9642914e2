package bbolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// FileName is the name of an agent's file inside its directory.
const FileName = "state.db"

// DefaultLockTimeout is how long opening an agent's file waits for another
// process's lock by default.
const DefaultLockTimeout = 100 * time.Millisecond

// pruneLimit bounds the task index entries one Save deletes, so that a
// Save's cost stays bounded however far behind retention is.
const pruneLimit = 64

// tuning is how a Store drives bbolt. BenchmarkTuning measures what each
// choice of defaultTuning buys.
type tuning struct {
	bolt bolt.Options
	// allocSize is how much a file grows by once it is larger than its
	// mapping (bolt.DB.AllocSize); every growth costs a truncate and an
	// extra fsync.
	allocSize int
	// fillPercent is how full bbolt packs a page it splits
	// (bolt.Bucket.FillPercent) in the snapshot bucket.
	fillPercent float64
	// burstFill replaces fillPercent in the snapshot bucket when a Save
	// is too large for the journal and folds (a burst of tasks made
	// durable at once): its pages are new list elements, appended in
	// order, and leaving a tenth of each page instead of three saves
	// pages of the fold. The small Saves that follow go back to
	// fillPercent: a last page split at burstFill may be merged back and
	// split again once (fillPercent says why), not at every Save.
	burstFill float64
	// indexFill is how full bbolt packs a page it splits in the task
	// index. A page is written whole each time a fold changes it (copy
	// on write), so the room bbolt's default of half a page leaves for
	// later inserts saves nothing: results of 1 KiB went two to a page
	// instead of three.
	indexFill float64
	// dropBatch is how many dropped elements of a list wait before they are
	// deleted, so that most Saves do not write the page at the front of the
	// list as well as the one at its back. While all of an agent's snapshot
	// fits one page they are deleted at once, since that page is written
	// anyway.
	dropBatch uint64
	// journalSize is the size of the journal (journal.go); 0 turns it off,
	// so that every Save commits to bbolt.
	journalSize int64
}

func defaultTuning() tuning {
	return tuning{
		bolt: bolt.Options{
			// The freelist is rebuilt by walking the file at open instead
			// of written at every commit: one page less per Save.
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
			// The first mapping, so that small agents never remap. On
			// Linux it does not grow the file.
			InitialMmapSize: 1 << 20,
			// Single-page caching (pagecache_linux.go).
			OpenFile: openFile,
		},
		allocSize: 1 << 20,
		// Keys are only ever appended in order (history, queue,
		// generations), so a split page is packed fuller than bbolt's half.
		// Not fuller than 70%: what is left for the new last page must stay
		// above bbolt's rebalance threshold (a quarter page), or the next
		// Save, which deletes a generation record there, merges it back
		// and splits it again.
		fillPercent: 0.7,
		burstFill:   0.9,
		indexFill:   0.9,
		dropBatch:   32,
		journalSize: defaultJournalSize,
	}
}

// Options configures a Store. The zero value is usable.
type Options struct {
	// Logger receives the store's warnings: a corrupt generation skipped by
	// Load, a result that could not be indexed. The zero Logger discards.
	Logger zerolog.Logger

	// Retention bounds the task index of each agent: how many results it
	// keeps (MaxTasks) and for how long after they finished (MaxAgeMs,
	// milliseconds, measured against the Timestamp of the snapshot being
	// saved). A zero field takes plugin.DefaultRetention's value (10,000
	// tasks, 7 days); a negative one means no bound. Each Save deletes at
	// most 64 entries beyond retention.
	Retention plugin.Retention

	// LockTimeout is how long opening an agent's file waits for another
	// process to release it before failing with plugin.ErrLocked. Zero means
	// DefaultLockTimeout (100ms); negative means do not wait at all.
	LockTimeout time.Duration

	// tune, when set, changes the default tuning; benchmarks use it.
	tune func(*tuning)
}

// Store is the bbolt storage backend: one bbolt file per agent under one
// directory. It is safe for concurrent use; operations on different agents
// run in parallel, operations on one agent one at a time.
type Store struct {
	dir  string // absolute
	opts Options
	tune tuning
	log  zerolog.Logger

	agents  backend.Agents[agentStore] // refused after Close
	aioOnce sync.Once                  // the warning that the kernel refused AIO fsync
}

// agentStore is one agent's file. Its mutex serialises every operation on the
// agent, including opening and closing the file.
type agentStore struct {
	id   string
	path string // {dir}/{id}/state.db

	mu     sync.Mutex // guards the fields below
	db     *bolt.DB   // nil until the first operation that needs it, after Delete and after Close
	closed bool       // set by Store.Close; every later operation fails with ErrClosed
	// tx holds the Saves written to the journal since the last fold, and
	// every read goes through it; nil when there are none.
	tx *bolt.Tx
	// jr is the agent's journal, open while db is.
	jr *journal
	// resynced is set when the journal replayed was damaged between good
	// records: the records after the damage were replayed, and Load may
	// load the newest generation without the list elements that the lost
	// records held (readGeneration's lenient mode).
	resynced bool
	// salvaged is set when the file was rebuilt from its readable pages
	// (salvage.go) since it was opened; like resynced, until a fold.
	salvaged bool
	// cache is the generation last saved or loaded: what the next Save
	// appends to. Nil when unknown (nothing loaded or saved yet since the
	// file was opened, or the last Save failed), which makes the next Save
	// rewrite the lists in full.
	cache *state
	// log is the operations of the Save in progress, kept from one Save to
	// the next so that a Save does not grow a new one (about 3 KiB per echo
	// task, the largest allocation of a task in the agent).
	log opLog
	// ids holds every task id of the index while db is open (idfilter.go);
	// nil while it is not. Read without mu.
	ids atomic.Pointer[idFilter]
}

// state is what an agentStore remembers of the generation it saved or loaded
// last: its record (without the snapshot) and the sum of every element of
// its lists, in order, so that the next Save can tell a continuation of the
// lists from a replacement.
type state struct {
	rec                         record
	hist, queue, outbox, recent []uint32
}

// list returns the range and the sums of one of st's lists, what the next
// Save continues: nil for a nil state, and for the outbox and the recent ids
// of a version 1 record (its body held them), so that those are written in
// full under fresh keys.
func (st *state) list(prefix byte) (*listRange, []uint32) {
	switch {
	case st == nil:
		return nil, nil
	case prefix == prefixHistory:
		return &st.rec.History, st.hist
	case prefix == prefixQueue:
		return &st.rec.Queue, st.queue
	case st.rec.inBody:
		return nil, nil
	case prefix == prefixOutbox:
		return &st.rec.Outbox, st.outbox
	default:
		return &st.rec.Recent, st.recent
	}
}

// Open returns the store rooted at dir, creating the directory (0o750) if
// needed. Agents' files are opened lazily, on their first Load, Save,
// Delete or TaskResult, and stay open, and locked, until Close.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("bbolt: open: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bbolt: open %s: %w", dir, err)
	}
	// The whole path made durable: a name on it lost in a power cut
	// would lose every agent under it.
	if err := privfs.MkdirAll(abs); err != nil {
		return nil, fmt.Errorf("bbolt: open %s: %w", abs, err)
	}
	if err := atomicfile.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("bbolt: open: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("bbolt: open: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("bbolt: open: %s is not a directory", abs)
	}
	opts.Retention = backend.Retention(opts.Retention)
	switch {
	case opts.LockTimeout == 0:
		opts.LockTimeout = DefaultLockTimeout
	case opts.LockTimeout < 0:
		opts.LockTimeout = time.Nanosecond // bbolt: 0 would wait forever
	}
	st := &Store{
		dir:  abs,
		opts: opts,
		tune: defaultTuning(),
		log:  opts.Logger.With().Str("store", "bbolt").Logger(),
	}
	if opts.tune != nil {
		opts.tune(&st.tune)
	}
	st.tune.bolt.Timeout = opts.LockTimeout
	return st, nil
}

// Dir returns the absolute directory of the store.
func (s *Store) Dir() string { return s.dir }

// lockedError is plugin.ErrLocked with the agent and the file.
type lockedError struct{ id, path string }

func (e *lockedError) Error() string {
	return fmt.Sprintf("agent %q is already running: its store %s is locked by another process", e.id, e.path)
}

func (e *lockedError) Unwrap() error { return plugin.ErrLocked }

// agent returns the agentStore of a valid id, locked; the caller unlocks it.
func (s *Store) agent(id string) (*agentStore, error) {
	a, err := s.agents.GetOrAdd(id, s.newAgent)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, plugin.ErrClosed
	}
	return a, nil
}

func (s *Store) newAgent(id string) *agentStore {
	return &agentStore{id: id, path: filepath.Join(s.dir, id, FileName)}
}

// syncPath makes durable what is written to the file at path, whoever
// wrote it: a process that died before its fsync leaves its writes in the
// page cache, where every later reader sees them.
func syncPath(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = datasync(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// open opens the agent's file if it is not open yet. Without create, a
// missing file is not created and open reports false. a.mu is held.
//
// A file is created whole or not at all (see create), so an existing file
// that is empty, cut short or damaged is never taken for a new agent: it is
// checked (checkFile) before bbolt maps it, then by bbolt's own consistency
// check, and refused with an error wrapping plugin.ErrCorrupt that names it.
// Opening writes nothing to an existing file; it syncs it (syncPath), and
// the journal, before reading them.
//
// A file whose structure is damaged (checkFile, bbolt or its consistency
// check refuse it) is salvaged (salvage.go): rebuilt from the values its
// readable pages hold, the damaged file kept beside it, and opened again.
func (s *Store) open(a *agentStore, create bool) (ok bool, err error) {
	if a.db != nil {
		return true, nil
	}
	ok, err = s.openFile(a, create)
	if err == nil || !errors.As(err, new(structureError)) {
		return ok, err
	}
	return s.reopenSalvaged(a, err)
}

// reopenSalvaged salvages the agent's damaged file, why says what is wrong
// with it, and opens the new one. a.mu is held and a.db is nil.
func (s *Store) reopenSalvaged(a *agentStore, why error) (bool, error) {
	if err := s.salvage(a, why); err != nil {
		return false, err
	}
	ok, err := s.openFile(a, false)
	if err != nil {
		return false, err
	}
	// Load reads the newest generation without what the damage took.
	a.resynced, a.salvaged = true, true
	return ok, nil
}

// openFile is open without the salvage: a damaged file is a
// structureError.
func (s *Store) openFile(a *agentStore, create bool) (ok bool, err error) {
	fi, err := os.Lstat(a.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !create {
			return false, nil
		}
		if err := s.create(a); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("%s is not a regular file", a.path)
	}
	created := fi == nil
	if !created {
		// What a process killed in the middle of a commit wrote is in the
		// page cache, not on the disk: this process would read it as the
		// newest commit, number its journal records after it, and lose them
		// all to a power cut that took the commit back. Made durable first,
		// it stays.
		if err := syncPath(a.path); err != nil {
			return false, err
		}
	}
	corrupt := func(why string, args ...any) error {
		return structureError{fmt.Errorf("%s is damaged: %s: %w", a.path, fmt.Sprintf(why, args...), plugin.ErrCorrupt)}
	}

	chk, err := checkFile(a.path)
	if err != nil {
		if errors.As(err, new(*fs.PathError)) {
			return false, err // the system refused: permissions, I/O
		}
		return false, corrupt("%v", err)
	}
	if chk.metaErr != nil {
		// The other meta page names the commit before the newest (or the
		// empty file's): the salvage reads the newest one's pages too.
		return false, corrupt("%v", chk.metaErr)
	}

	// Whatever got past checkFile and still makes bbolt panic (or fault on
	// its mapping) is a damaged file to us, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corrupt("bbolt: %v", r)
		}
	}()
	bo := s.tune.bolt
	db, err := bolt.Open(a.path, privfs.FileMode, &bo)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return false, &lockedError{id: a.id, path: a.path}
	case err == nil:
	case errors.As(err, new(*fs.PathError)), errors.As(err, new(syscall.Errno)):
		return false, err // the system refused: permissions, space, I/O
	default:
		// bbolt's verdict on the content: ErrInvalid, ErrChecksum,
		// ErrVersionMismatch, or one it makes no sentinel for.
		return false, structureError{fmt.Errorf("%s is not a valid bbolt file (%v): %w", a.path, err, plugin.ErrCorrupt)}
	}
	if err := boltCheck(db); err != nil {
		_ = db.Close()
		return false, corrupt("bbolt's consistency check: %v", err)
	}
	db.AllocSize = s.tune.allocSize
	if created {
		// Make the new file's name durable along with its content.
		if err := atomicfile.SyncDir(filepath.Dir(a.path)); err != nil {
			_ = db.Close()
			return false, err
		}
		if err := atomicfile.SyncDir(s.dir); err != nil {
			_ = db.Close()
			return false, err
		}
	}
	a.db = db
	a.cache = nil
	a.ids.Store(nil)
	if err := s.replay(a); err != nil {
		_ = db.Close()
		a.db = nil
		return false, err
	}
	var ids *idFilter
	if err := s.view(a, func(tx *bolt.Tx) error { ids = buildIDFilter(tx); return nil }); err != nil {
		_ = a.drop()
		_ = db.Close()
		a.db = nil
		return false, err
	}
	a.ids.Store(ids)
	return true, nil
}

// replay opens the agent's journal and applies the records state.db does
// not hold yet to a new transaction, a.tx (see journal.go). a.mu is held
// and a.db open, with no transaction.
func (s *Store) replay(a *agentStore) (err error) {
	a.resynced = false
	var folded uint64
	var foldedErr error
	if err := view(a.db, func(tx *bolt.Tx) error {
		mb := tx.Bucket(bucketMark)
		folded, foldedErr = readFolded(mb)
		if foldedErr == nil && (mb == nil || mb.Get(keyFolded) == nil) && tx.Bucket(bucketSnapshot) != nil {
			// Saved to, but no journal mark: a file of an older version,
			// which has no journal, or a damaged mark bucket.
			foldedErr = errNoFolded
		}
		return nil
	}); err != nil {
		return err
	}
	jr, r, err := readJournal(journalPath(a.path), folded, s.tune.journalSize)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// At most one line: the damage that decides where the agent goes on.
	switch {
	case errors.Is(foldedErr, errNoFolded) && jr.f == nil:
		// A file of an older version: it has no journal either. Its next
		// Save commits to bbolt, which writes the mark before any record.
		jr.off = jr.size
	case foldedErr != nil:
		// Which records are newer than state.db is unknown: none is
		// replayed, and the next Save commits to bbolt, with a number
		// above every record in the file.
		s.log.Error().Str("agent", a.id).Str("file", a.path).Err(foldedErr).
			Msg("the journal's mark in the store is damaged: loading the store without the journal, whose last saves are lost")
		jr.next, jr.off, r.recs = r.top+1, jr.size, nil
	case r.resumed > 0:
		// Damage between good records: the records it hit are lost, those
		// after it are replayed (each one's puts and deletes hold by
		// themselves), and Load leaves out of the newest generation the
		// elements the lost records had added (a.resynced).
		s.log.Error().Str("agent", a.id).Str("file", jr.path).Uint64("record", jr.next).Uint64("lost", r.lost).
			Uint64("resumed", r.resumed).Int("replayed", r.after).
			Msgf("the journal is damaged at record %d: %d saves are lost (records %d to %d); the %d records after the damage are replayed",
				jr.next, r.lost, jr.next, r.resumed-1, r.after)
		a.resynced = true
		// The next record must be numbered above every one in the file, or
		// a crash could bring a lost one back after it: the next Save
		// commits to bbolt with that number.
		jr.next, jr.off = r.top+1, jr.size
	case r.short > 0:
		s.log.Warn().Str("agent", a.id).Str("file", jr.path).Int64("size", r.short).Uint64("record", jr.next).
			Msgf("the journal is cut short (%d of %d bytes): a save after record %d, if there was one, is lost", r.short, jr.size, jr.next-1)
	case r.zeroed >= 0:
		s.log.Warn().Str("agent", a.id).Str("file", jr.path).Int64("offset", r.zeroed).Uint64("record", jr.next).
			Msgf("the journal holds a page of zeros at %d, after record %d: damaged; the saves it held, if any, are lost", r.zeroed, jr.next-1)
	case r.torn:
		s.log.Warn().Str("agent", a.id).Str("file", jr.path).Uint64("record", jr.next).
			Msgf("the journal's record %d does not check: cut short by a power cut while it was written (its save had not returned), or damaged (its save is lost)", jr.next)
	}
	a.jr = jr
	if len(r.recs) == 0 {
		return nil
	}
	defer func() {
		if err != nil {
			_ = a.drop()
		}
	}()
	defer catchDamage(a.path, &err)()
	if a.tx, err = a.db.Begin(true); err != nil {
		return err
	}
	for i, ops := range r.recs {
		num := folded + 1 + uint64(i)
		if r.nums != nil {
			num = r.nums[i]
		}
		if err := applyOps(a.tx, ops, &s.tune); err != nil {
			return fmt.Errorf("%s: record %d: %v: %w", jr.path, num, err, plugin.ErrCorrupt)
		}
	}
	return nil
}

// fold commits a.tx to bbolt with the number of the last journal record it
// holds, after which the journal starts again at its beginning. On error
// the transaction is gone, and the caller rewinds.
func (s *Store) fold(a *agentStore, tx *bolt.Tx) error {
	a.tx = nil
	if a.jr != nil {
		if err := putFolded(tx, a.jr.next-1); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	a.resynced, a.salvaged = false, false
	if a.jr != nil {
		a.jr.off = 0
	}
	return nil
}

// rewind forgets what a failed Save did: the transaction is rolled back and
// the journal replayed from the file, as a restart would. a.mu is held.
func (s *Store) rewind(a *agentStore) {
	a.cache = nil
	_ = a.drop()
	if a.db == nil {
		return
	}
	if err := s.replay(a); err != nil {
		s.log.Error().Str("agent", a.id).Err(err).Msg("the journal could not be read again after a failed save; closing the store of the agent")
		_ = a.db.Close()
		a.db = nil
		a.ids.Store(nil)
	}
}

// end folds the Saves this process wrote to the journal into state.db
// and closes the journal, before the file is closed; a process that only
// read writes nothing. a.mu is held.
func (s *Store) end(a *agentStore) error {
	var err error
	if a.tx != nil && a.jr != nil && a.jr.appended {
		err = s.fold(a, a.tx)
	}
	if derr := a.drop(); err == nil {
		err = derr
	}
	return err
}

// drop rolls back the agent's open transaction, if any, and closes its
// journal. a.mu is held.
func (a *agentStore) drop() error {
	var err error
	if a.tx != nil {
		err = a.tx.Rollback()
		a.tx = nil
	}
	if cerr := a.jr.close(); err == nil {
		err = cerr
	}
	a.jr = nil
	return err
}

// boltCheck runs bbolt's consistency check (tx.Check) in a read
// transaction and returns its first findings. After checkFile it only reads
// pages inside the file; its cost is one more walk of the pages in use,
// from memory (BenchmarkOpen measures it).
func boltCheck(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 3 {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// tmpPrefix starts the name of a file being created (see create).
const tmpPrefix = FileName + ".new-"

// create makes the agent's file whole or not at all: bbolt initialises it
// under a temporary name, and a hard link, which fails when the name is
// taken, gives it its name. So a state.db that exists was complete when it
// appeared, and one that is empty or cut short is damage, never a new
// agent. A temporary file left by a crash is removed with the agent.
func (s *Store) create(a *agentStore) error {
	dir := filepath.Dir(a.path)
	if err := privfs.MkdirAll(dir); err != nil {
		return err
	}
	name, db, err := s.openTemp(dir)
	defer os.Remove(name)
	if err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	// A journal without its file is what a deleted agent left: it must
	// not be replayed into the new one.
	if err := os.Remove(journalPath(a.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Link(name, a.path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// openTemp creates a new bbolt file under a temporary name in dir (bbolt
// writes its first four pages and syncs them) and opens it. The caller
// removes name, which is set whenever a file was made, error or not.
func (s *Store) openTemp(dir string) (name string, db *bolt.DB, err error) {
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return "", nil, err
	}
	name = tmp.Name()
	if err := tmp.Close(); err != nil {
		return name, nil, err
	}
	bo := s.tune.bolt
	bo.Timeout = 0
	db, err = bolt.Open(name, privfs.FileMode, &bo)
	return name, db, err
}

// Save stores snap as a new generation of its agent, keeping the previous
// one. Only the history and queue elements past those of the previous Save
// are written. Save returns after bbolt's commit, whose last step writes and
// syncs the meta page: that is the commit point, before it Load sees the old
// snapshot and after it the new one.
//
// ctx is checked before the transaction starts; a started Save runs to its
// end. Save does not keep or change snap.
func (s *Store) Save(ctx context.Context, snap *agent.Snapshot) error {
	if snap == nil {
		return fmt.Errorf("bbolt: save: %w: nil snapshot", agent.ErrInvalidSnapshot)
	}
	id := snap.AgentID
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	if err := agent.ValidateID(id); err != nil {
		return fmt.Errorf("bbolt: save: %w", err)
	}
	if err := snap.Validate(); err != nil {
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	body, err := recordBody(snap)
	if err != nil {
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	a, err := s.agent(id)
	if err != nil {
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	defer a.mu.Unlock()
	if _, err := s.open(a, true); err != nil {
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	st, err := s.save(a, snap, body, agent.BusySave(ctx))
	if err != nil {
		s.rewind(a) // what the files hold is the truth, and the next Save rewrites the lists in full
		return fmt.Errorf("bbolt: save %s: %w", id, err)
	}
	a.cache = st
	return nil
}

// save writes snap in the agent's open transaction, or a new one, and makes
// it durable: in the journal when it continues a generation the store knows
// and fits, otherwise by committing to bbolt (a fold). On error the caller
// rewinds.
func (s *Store) save(a *agentStore, snap *agent.Snapshot, body []byte, polled bool) (st *state, err error) {
	defer catchDamage(a.path, &err)()
	tx := a.tx
	if tx == nil {
		if tx, err = a.db.Begin(true); err != nil {
			return nil, err
		}
		a.tx = tx // rolled back by rewind on error
	}
	log := &a.log
	// The buffer is kept for the next Save, up to the journal's size
	// while Saves overflow it (a burst: its Saves would grow it afresh
	// each time), up to idleKeptLog once one did not (an agent idle after
	// a burst does not hold the burst's buffer).
	if cap(log.b) > maxKeptLog || !log.over && cap(log.b) > idleKeptLog {
		log.b = nil
	}
	log.b, log.over, log.limit = log.b[:0], false, s.tune.journalSize
	if a.jr == nil || s.tune.journalSize <= 0 {
		log.over = true // no journal: the Save folds, its operations are not needed
	}
	if st, err = s.write(wtx{Tx: tx, log: log}, a, snap, body); err != nil {
		return nil, err
	}
	if !log.over && a.cache != nil && a.jr != nil && s.tune.journalSize > 0 && a.jr.fits(len(log.b)) {
		err := a.jr.append(log.b, polled) // append copies the operations
		if polled && aioRefused() {
			s.aioOnce.Do(func() {
				s.log.Warn().Msg("bbolt: the kernel refused AIO fsync (Linux before 4.18, a file system without it, or aio-max-nr reached): " +
					"journal syncs use fdatasync, which holds the agent's processor while the disk works")
			})
		}
		return st, err
	}
	if log.over && a.jr != nil && s.tune.journalSize > 0 {
		// Too large for the journal: a burst (burstFill).
		if b := tx.Bucket(bucketSnapshot); b != nil {
			b.FillPercent = s.tune.burstFill
		}
	}
	return st, s.fold(a, tx)
}

// write is the transaction of Save. It returns the state it wrote.
func (s *Store) write(tx wtx, a *agentStore, snap *agent.Snapshot, body []byte) (*state, error) {
	b, err := tx.createBucketIfNotExists(bucketSnapshot)
	if err != nil {
		return nil, err
	}
	b.FillPercent = s.tune.fillPercent
	// The generation this Save replaces and keeps as the previous one.
	var base *record
	if a.cache != nil {
		base = &a.cache.rec
	} else {
		base = newestRecord(b.Bucket)
	}
	top, _ := lastKey(b.Bucket, prefixRecord)
	st := &state{rec: record{Gen: top + 1}}
	rec := &st.rec

	prev := a.cache // nil when unknown: every list is written in full
	hist := snap.Memory.ShortTermHistory
	pr, ps := prev.list(prefixHistory)
	rec.History, st.hist, err = writeList(b, prefixHistory, pr, ps, snap.HistorySeq, len(hist), hist == nil,
		func(dst []byte, i int) ([]byte, error) { return marshalAppend(dst, &hist[i]) })
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	queue := snap.EventQueueBackup
	pr, ps = prev.list(prefixQueue)
	rec.Queue, st.queue, err = writeList(b, prefixQueue, pr, ps, snap.QueueSeq, len(queue), queue == nil,
		func(dst []byte, i int) ([]byte, error) { return queue[i].AppendJSON(dst) })
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	out := snap.Outbox
	pr, ps = prev.list(prefixOutbox)
	outSeq, ok := snap.OutboxSeq()
	if !ok {
		pr, ps = nil, nil // a hole: written in full under fresh keys
	}
	// The results appended here are indexed below in the same encoding:
	// encoded once (index takes them from encoded).
	encoded := make(map[uint64][]byte)
	rec.Outbox, st.outbox, err = writeList(b, prefixOutbox, pr, ps, outSeq, len(out), out == nil,
		func(dst []byte, i int) ([]byte, error) {
			f, err := out[i].AppendJSON(dst)
			if err == nil {
				encoded[out[i].Seq] = f[len(dst):]
			}
			return f, err
		})
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	ids := snap.RecentEventIDs
	pr, ps = prev.list(prefixRecent)
	rec.Recent, st.recent, err = writeList(b, prefixRecent, pr, ps, snap.RecentSeq, len(ids), ids == nil,
		func(dst []byte, i int) ([]byte, error) { return append(dst, ids[i]...), nil })
	if err != nil {
		return nil, fmt.Errorf("recent event ids: %w", err)
	}

	if base != nil {
		rec.TaskNext = base.TaskNext
	}
	if rec.TaskNext, err = s.index(tx, a, snap, rec.TaskNext, encoded); err != nil {
		return nil, fmt.Errorf("task index: %w", err)
	}

	if err := b.Put(key(prefixRecord, rec.Gen), encodeRecord(nil, rec, body)); err != nil {
		return nil, err
	}
	if err := writeMark(tx, b, rec.Gen, base); err != nil {
		return nil, fmt.Errorf("generation mark: %w", err)
	}

	// Keep base and rec; drop every other generation (normally one: the
	// one before base) and the elements no longer referenced below them.
	keep := top
	if base != nil {
		keep = base.Gen
	}
	if err := deleteRecords(b, keep, rec.Gen); err != nil {
		return nil, err
	}
	if base != nil {
		// While the whole bucket is one page, that page is written anyway:
		// dropped elements go at once. Otherwise they wait for a batch, so
		// that most Saves do not write the page at the front of the list.
		batch := s.tune.dropBatch
		if singlePage(tx.Tx, b.Bucket) {
			batch = 1
		}
		if err := deleteBelow(b, prefixHistory, min(base.History.Start, rec.History.Start), batch); err != nil {
			return nil, err
		}
		if err := deleteBelow(b, prefixQueue, min(base.Queue.Start, rec.Queue.Start), batch); err != nil {
			return nil, err
		}
		if err := deleteBelow(b, prefixOutbox, min(base.Outbox.Start, rec.Outbox.Start), batch); err != nil {
			return nil, err
		}
		if err := deleteBelow(b, prefixRecent, min(base.Recent.Start, rec.Recent.Start), batch); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// marshalAppend appends json.Marshal(v) to dst.
func marshalAppend(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// singlePage reports whether the bucket was a single page (or inline in its
// parent) when the transaction began.
func singlePage(tx *bolt.Tx, b *bolt.Bucket) bool {
	root := b.Root()
	if root == 0 {
		return true
	}
	info, err := tx.Page(int(root))
	return err == nil && info != nil && info.Type == "leaf"
}

// writeList stores the n elements of a list whose element 0 is at kernel
// position seq, given the range prev of the generation this Save builds on
// and the sums of its elements (nil when unknown). When the list is prev's
// with elements dropped from the front and appended at the back, only the
// appended ones are written, under the keys that continue prev's; otherwise
// the whole list is written under fresh keys above every key in use, so that
// prev's elements stay intact. enc appends an element's payload to dst.
// writeList returns the new range and the sums of its elements.
func writeList(b *wbucket, prefix byte, prev *listRange, prevSums []uint32, seq uint64, n int, isNil bool,
	enc func(dst []byte, i int) ([]byte, error)) (listRange, []uint32, error) {
	r := listRange{Seq: seq, Count: uint64(n), Nil: isNil}
	from, sums, ok, err := continues(prev, prevSums, seq, n, enc)
	if err != nil {
		return r, nil, err
	}
	if ok {
		r.Start = prev.Start + (seq - prev.Seq)
	} else {
		last, found := lastKey(b.Bucket, prefix)
		if found {
			r.Start = last + 1
		}
		from, sums = 0, make([]uint32, 0, n)
	}
	if r.Start > maxKey || r.Count > maxKey-r.Start {
		return r, nil, fmt.Errorf("element keys exhausted at %d", r.Start)
	}
	for i := from; i < n; i++ {
		// The payload is encoded after its frame's header, and the frame
		// sealed in place.
		f, err := enc(newFrame(), i)
		if err != nil {
			return r, nil, fmt.Errorf("element %d: %w", seq+uint64(i), err)
		}
		// bbolt keeps key and value until the commit: both are fresh.
		k := key(prefix, r.Start+uint64(i))
		if err := b.Put(k, sealFrame(f, k)); err != nil {
			return r, nil, err
		}
		sums = append(sums, sum(f[frameHeader:]))
	}
	if n > 0 {
		r.LastSum = sums[n-1]
	}
	return r, sums, nil
}

// continues reports whether a list of n elements starting at kernel position
// seq is prev with elements dropped from its front and appended at its back,
// and if so returns the index of the first appended element and the sums of
// the elements before it. It relies on the kernel's promise that an element
// never changes once appended, and checks it only where a replaced list would
// most likely differ: the first and the last element the two lists share,
// compared by sum.
func continues(prev *listRange, prevSums []uint32, seq uint64, n int,
	enc func(dst []byte, i int) ([]byte, error)) (from int, sums []uint32, ok bool, err error) {
	if prev == nil || seq < prev.Seq || uint64(len(prevSums)) != prev.Count {
		return 0, nil, false, nil
	}
	if room := maxKey - prev.Start; uint64(n) > room || seq-prev.Seq > room-uint64(n) {
		return 0, nil, false, nil // the keys would overflow: start afresh
	}
	prevEnd := prev.Seq + prev.Count // kernel position after prev's last element
	if prev.Count == 0 || seq >= prevEnd {
		// Every element of prev dropped: all of these are new.
		return 0, make([]uint32, 0, n), true, nil
	}
	drop := seq - prev.Seq    // index in prev of the new element 0
	last := prevEnd - 1 - seq // index in the new list of prev's last element
	if last >= uint64(n) {
		return 0, nil, false, nil // cut at the back
	}
	for _, i := range []uint64{0, last} {
		p, err := enc(nil, int(i))
		if err != nil {
			return 0, nil, false, err
		}
		if sum(p) != prevSums[drop+i] {
			return 0, nil, false, nil
		}
	}
	// Appending may reuse prevSums' array past its length; prevSums itself
	// is not changed, and a failed Save drops the cache anyway.
	return int(last) + 1, prevSums[drop:], true, nil
}

// seekLast moves c to the last key below those of the next prefix: the
// highest key under prefix, if there is one.
func seekLast(c *bolt.Cursor, prefix byte) (k, v []byte) {
	if k, _ := c.Seek([]byte{prefix + 1}); k == nil {
		return c.Last()
	}
	return c.Prev()
}

// lastKey returns the highest number under prefix.
func lastKey(b *bolt.Bucket, prefix byte) (uint64, bool) {
	k, _ := seekLast(b.Cursor(), prefix)
	return keyNum(prefix, k)
}

// newestRecord returns the newest generation record that decodes, or nil.
func newestRecord(b *bolt.Bucket) *record {
	c := b.Cursor()
	k, v := seekLast(c, prefixRecord)
	for ; k != nil && k[0] == prefixRecord; k, v = c.Prev() {
		if r, err := decodeRecord(k, v); err == nil {
			r.Snap = nil
			return r
		}
	}
	return nil
}

// deleteRecords deletes every generation record but keep and newest.
func deleteRecords(b *wbucket, keep, newest uint64) error {
	var doomed [][]byte
	c := b.Cursor()
	for k, _ := c.Seek([]byte{prefixRecord}); k != nil && k[0] == prefixRecord; k, _ = c.Next() {
		if g, ok := keyNum(prefixRecord, k); !ok || g != keep && g != newest {
			doomed = append(doomed, append([]byte(nil), k...))
		}
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteBelow deletes the elements under prefix with a key below limit,
// once there are batch keys' worth of them. Its cost is proportional to what
// it deletes.
func deleteBelow(b *wbucket, prefix byte, limit, batch uint64) error {
	c := b.Cursor()
	k, _ := c.Seek([]byte{prefix})
	if first, ok := keyNum(prefix, k); !ok || first >= limit || limit-first < batch {
		return nil
	}
	// Found going forward, deleted going back through the same cursor:
	// Bucket.Delete would search from the root for every key (a third of
	// a burst's writing in BenchmarkSaveBurst), and a cursor's Delete
	// shifts the elements after it in the node, so that Next would skip
	// one, but leaves those before it where they were.
	last := k
	for ; k != nil && k[0] == prefix; k, _ = c.Next() {
		if n, ok := keyNum(prefix, k); ok && n >= limit {
			break
		}
		last = k
	}
	last = append([]byte(nil), last...)
	k, _ = c.Seek(last)
	for ; k != nil && k[0] == prefix; k, _ = c.Prev() {
		if err := b.deleteAt(c, k); err != nil {
			return err
		}
	}
	return nil
}

// Load returns the agent's newest generation that passes every check, or
// nil, nil when the agent has no file or nothing saved. A generation whose
// record or any of its elements fails its checksum or does not decode is
// logged and skipped; when none is left Load returns an error wrapping
// plugin.ErrCorrupt. Load never creates a file.
func (s *Store) Load(ctx context.Context, agentID string) (*agent.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bbolt: load %s: %w", agentID, err)
	}
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("bbolt: load: %w", err)
	}
	a, err := s.agent(agentID)
	if err != nil {
		return nil, fmt.Errorf("bbolt: load %s: %w", agentID, err)
	}
	defer a.mu.Unlock()
	if ok, err := s.open(a, false); err != nil {
		return nil, fmt.Errorf("bbolt: load %s: %w", agentID, err)
	} else if !ok {
		return nil, nil
	}
	var snap *agent.Snapshot
	var st *state
	read := func(tx *bolt.Tx) error {
		var err error
		snap, st, err = s.read(tx, a)
		return err
	}
	err = s.view(a, read)
	if errors.As(err, new(structureError)) && !a.salvaged {
		// The pages hold together but not the buckets: salvaged too.
		_ = a.drop()
		_ = a.db.Close()
		a.db, a.cache = nil, nil
		a.ids.Store(nil)
		if _, err = s.reopenSalvaged(a, err); err == nil {
			err = s.view(a, read)
		}
	}
	if err != nil {
		a.cache = nil
		return nil, fmt.Errorf("bbolt: load %s: %w", agentID, err)
	}
	a.cache = st
	return snap, nil
}

// view runs fn in a read transaction, turning a bbolt panic on a damaged
// page into ErrCorrupt.
func view(db *bolt.DB, fn func(tx *bolt.Tx) error) (err error) {
	defer catchDamage(db.Path(), &err)()
	return db.View(fn)
}

// catchDamage makes a memory fault a panic until the function it is
// deferred in returns, and turns a panic there (bbolt's, on a damaged page)
// into an error wrapping ErrCorrupt that names path:
//
//	defer catchDamage(path, &err)()
func catchDamage(path string, err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			*err = fmt.Errorf("%s is damaged (%v): %w", path, r, plugin.ErrCorrupt)
		}
	}
}

// view runs fn on what the agent's Saves left: in the transaction holding
// the journaled ones, or else in a read transaction. a.mu is held.
func (s *Store) view(a *agentStore, fn func(tx *bolt.Tx) error) (err error) {
	if a.tx == nil {
		return view(a.db, fn)
	}
	defer catchDamage(a.path, &err)()
	return fn(a.tx)
}

// read is the transaction of Load. A file that was ever written never reads
// as new: a missing bucket, a missing record, a generation mark that names
// none of the records, or a bucket bbolt does not know (a damaged name) is
// corruption, answered with the previous generation when the mark allows it
// and otherwise with an error wrapping plugin.ErrCorrupt.
func (s *Store) read(tx *bolt.Tx, a *agentStore) (*agent.Snapshot, *state, error) {
	corrupt := func(why string, args ...any) error {
		return fmt.Errorf("%s is damaged: %s: %w", a.path, fmt.Sprintf(why, args...), plugin.ErrCorrupt)
	}
	var unknown []string
	_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if !bytes.Equal(name, bucketSnapshot) && !bytes.Equal(name, bucketTasks) && !bytes.Equal(name, bucketMark) {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
		return nil
	})
	// A bucket missing or unknown: the salvage (Load) reads the values
	// whatever bucket holds them.
	structure := func(why string, args ...any) error { return structureError{corrupt(why, args...)} }
	if len(unknown) > 0 {
		return nil, nil, structure("it holds buckets this store never writes (%s): a damaged name", strings.Join(unknown, ", "))
	}
	b, mb, tb := tx.Bucket(bucketSnapshot), tx.Bucket(bucketMark), tx.Bucket(bucketTasks)
	if b == nil {
		// bbolt's first two transaction ids are those of the meta pages it
		// writes when it creates the file; every commit after them is a Save,
		// which writes the snapshot bucket.
		if tx.ID() > 1 || mb != nil || tb != nil {
			return nil, nil, structure("%d transactions were committed, but the snapshot bucket is missing", tx.ID()-1)
		}
		return nil, nil, nil
	}
	m, markErr := readMark(mb)
	switch {
	case markErr != nil:
		s.log.Warn().Str("agent", a.id).Str("file", a.path).Err(markErr).
			Msg("the generation mark is damaged; loading the newest good generation without it")
	case m == nil && b.Get(keyMarked) != nil:
		return nil, nil, structure("the generation mark is missing")
	case m != nil && m.Tasks && tb == nil:
		return nil, nil, structure("the task index is missing")
	}

	var gens [][2][]byte // newest first; bbolt's slices stay valid until the transaction ends
	c := b.Cursor()
	for k, v := c.Seek([]byte{prefixRecord}); k != nil && k[0] == prefixRecord; k, v = c.Next() {
		gens = append([][2][]byte{{k, v}}, gens...)
	}
	if len(gens) == 0 {
		return nil, nil, corrupt("the snapshot bucket holds no generation record")
	}
	var firstErr error
	skip := func(gen uint64, err error) {
		s.log.Warn().Str("agent", a.id).Uint64("generation", gen).Str("file", a.path).Err(err).
			Msg("skipping a corrupt snapshot generation")
		if firstErr == nil {
			firstErr = fmt.Errorf("generation %d: %w", gen, err)
		}
	}
	if m != nil {
		if newest, _ := keyNum(prefixRecord, gens[0][0]); newest < m.Gen {
			skip(m.Gen, fmt.Errorf("the generation mark names generation %d, whose record is missing", m.Gen))
		}
	}
	for _, g := range gens {
		gen, _ := keyNum(prefixRecord, g[0])
		if m != nil && gen != m.Gen && gen != m.Base {
			if gen > m.Gen {
				skip(gen, fmt.Errorf("newer than generation %d, the newest the mark names", m.Gen))
				continue
			}
			// Older than the two generations the last Save kept: loading
			// it would go back further than one Save without a word.
			break
		}
		snap, st, err := readGeneration(b, a.id, g[0], g[1])
		if err != nil && a.resynced {
			// The journal lost records between good ones: the elements
			// they added are missing. The generation is loaded without
			// them; every element loaded checks.
			var left leftOut
			if snap, left, err = readPartial(b, a.id, g[0], g[1]); err == nil {
				what := "the damaged journal records"
				if a.salvaged {
					what = "the damaged pages of the store"
				}
				s.log.Error().Str("agent", a.id).Uint64("generation", gen).Str("file", a.path).
					Uint64("tick", snap.TickIndex).Int("history", left.hist).Int("queue", left.queue).
					Int("outbox", left.outbox).Int("recent", left.recent).
					Msgf("loaded generation %d without what %s held: %d history messages, %d queued events, %d undelivered results, %d recent event ids are lost",
						gen, what, left.hist, left.queue, left.outbox, left.recent)
				// The next Save rewrites every list in full, under fresh keys.
				st = nil
			}
		}
		if err != nil {
			skip(gen, err)
			continue
		}
		if bad := damagedTasks(tb); bad > 0 {
			s.log.Warn().Str("agent", a.id).Str("file", a.path).Int("entries", bad).
				Msgf("the task index holds %d damaged entries: the results of those tasks are lost", bad)
		}
		if m != nil && gen != m.Gen {
			s.log.Warn().Str("agent", a.id).Uint64("generation", gen).Uint64("newest", m.Gen).Str("file", a.path).
				Uint64("tick", snap.TickIndex).
				Msgf("loaded generation %d, the one before the newest (%d), which is missing or damaged: the last save's changes are lost", gen, m.Gen)
		}
		return snap, st, nil
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no generation the mark names (%d, %d) is stored", m.Gen, m.Base)
	}
	// No generation loads whole: an element both need is damaged (one
	// element is written once, and every later generation that keeps it
	// references it). The newest whose record checks is loaded without
	// its damaged elements: the damage costs what it hit, not the agent.
	for _, g := range gens {
		gen, _ := keyNum(prefixRecord, g[0])
		if m != nil && gen != m.Gen && gen != m.Base {
			continue
		}
		snap, left, err := readPartial(b, a.id, g[0], g[1])
		if err != nil {
			continue
		}
		s.log.Error().Str("agent", a.id).Uint64("generation", gen).Str("file", a.path).
			Uint64("tick", snap.TickIndex).Int("history", left.hist).Int("queue", left.queue).
			Int("outbox", left.outbox).Int("recent", left.recent).
			Msgf("no generation loads whole; loaded generation %d without its damaged elements: %d history messages, %d queued events, %d undelivered results, %d recent event ids are lost",
				gen, left.hist, left.queue, left.outbox, left.recent)
		return snap, nil, nil
	}
	return nil, nil, fmt.Errorf("no good generation in %s (%d stored; newest: %v): %w",
		a.path, len(gens), firstErr, plugin.ErrCorrupt)
}

// readGeneration decodes one generation and every element it references.
func readGeneration(b *bolt.Bucket, id string, k, v []byte) (*agent.Snapshot, *state, error) {
	rec, err := decodeRecord(k, v)
	if err != nil {
		return nil, nil, err
	}
	snap := rec.Snap
	rec.Snap = nil
	if snap.AgentID != id {
		return nil, nil, fmt.Errorf("record of agent %q", snap.AgentID)
	}
	st := &state{rec: *rec}
	if st.hist, err = readJSONList(b, prefixHistory, rec.History, &snap.Memory.ShortTermHistory); err != nil {
		return nil, nil, fmt.Errorf("history: %w", err)
	}
	if st.queue, err = readJSONList(b, prefixQueue, rec.Queue, &snap.EventQueueBackup); err != nil {
		return nil, nil, fmt.Errorf("queue: %w", err)
	}
	if rec.inBody {
		// Version 1: the body held them.
		return snap, st, nil
	}
	if st.outbox, err = readJSONList(b, prefixOutbox, rec.Outbox, &snap.Outbox); err != nil {
		return nil, nil, fmt.Errorf("outbox: %w", err)
	}
	if !rec.Recent.Nil {
		snap.RecentEventIDs = make([]string, 0, min(rec.Recent.Count, 1<<16))
	}
	st.recent, err = readList(b, prefixRecent, rec.Recent, func(p []byte) error {
		snap.RecentEventIDs = append(snap.RecentEventIDs, string(p))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("recent event ids: %w", err)
	}
	return snap, st, nil
}

// leftOut counts, per list, the elements readPartial left out.
type leftOut struct{ hist, queue, outbox, recent int }

// readPartial decodes one generation like readGeneration, but leaves out
// of its lists the elements that are missing, fail their checksum or do not
// decode, and counts them. The record itself must check. It is how Load
// reads the newest generation after the journal lost records between good
// ones: the elements those records added are gone, everything else stands.
func readPartial(b *bolt.Bucket, id string, k, v []byte) (*agent.Snapshot, leftOut, error) {
	var left leftOut
	rec, err := decodeRecord(k, v)
	if err != nil {
		return nil, left, err
	}
	snap := rec.Snap
	rec.Snap = nil
	if snap.AgentID != id {
		return nil, left, fmt.Errorf("record of agent %q", snap.AgentID)
	}
	left.hist = readPartialJSON(b, prefixHistory, rec.History, &snap.Memory.ShortTermHistory)
	left.queue = readPartialJSON(b, prefixQueue, rec.Queue, &snap.EventQueueBackup)
	if rec.inBody {
		return snap, left, nil
	}
	left.outbox = readPartialJSON(b, prefixOutbox, rec.Outbox, &snap.Outbox)
	if !rec.Recent.Nil {
		snap.RecentEventIDs = make([]string, 0, min(rec.Recent.Count, 1<<16))
	}
	left.recent = readPartialList(b, prefixRecent, rec.Recent, func(p []byte) error {
		snap.RecentEventIDs = append(snap.RecentEventIDs, string(p))
		return nil
	})
	return snap, left, nil
}

// readPartialJSON is readJSONList for readPartial: it returns the number
// of elements left out.
func readPartialJSON[T any](b *bolt.Bucket, prefix byte, r listRange, list *[]T) int {
	if !r.Nil {
		*list = make([]T, 0, min(r.Count, 1<<16))
	}
	return readPartialList(b, prefix, r, func(p []byte) error {
		var e T
		if err := json.Unmarshal(p, &e); err != nil {
			return err
		}
		*list = append(*list, e)
		return nil
	})
}

// readPartialList decodes, in order, the elements of r that are stored and
// check, and returns the number of the others.
func readPartialList(b *bolt.Bucket, prefix byte, r listRange, dec func(p []byte) error) int {
	got := uint64(0)
	c := b.Cursor()
	for k, v := c.Seek(key(prefix, r.Start)); k != nil; k, v = c.Next() {
		if k[0] != prefix {
			break
		}
		n, ok := keyNum(prefix, k)
		if !ok {
			continue // a damaged key
		}
		if n >= r.end() {
			break
		}
		p, err := openFrame(k, v)
		if err != nil || dec(p) != nil {
			continue
		}
		got++
	}
	return int(r.Count - got)
}

// readJSONList reads the list r of JSON elements into *list (nil when the
// list was saved nil) and returns their sums.
func readJSONList[T any](b *bolt.Bucket, prefix byte, r listRange, list *[]T) ([]uint32, error) {
	if !r.Nil {
		*list = make([]T, 0, min(r.Count, 1<<16))
	}
	return readList(b, prefix, r, func(p []byte) error {
		*list = append(*list, *new(T))
		return json.Unmarshal(p, &(*list)[len(*list)-1])
	})
}

// readList checks and decodes the elements of r in order, and returns their
// sums.
func readList(b *bolt.Bucket, prefix byte, r listRange, dec func(p []byte) error) ([]uint32, error) {
	sums := make([]uint32, 0, min(r.Count, 1<<16))
	if r.Count == 0 {
		return sums, nil
	}
	c := b.Cursor()
	k, v := c.Seek(key(prefix, r.Start))
	for i := uint64(0); i < r.Count; i++ {
		if n, ok := keyNum(prefix, k); !ok || n != r.Start+i {
			return nil, fmt.Errorf("element %d (key %d) is missing", r.Seq+i, r.Start+i)
		}
		p, err := openFrame(k, v)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", r.Seq+i, err)
		}
		sums = append(sums, sum(p))
		if i == r.Count-1 && sums[i] != r.LastSum {
			return nil, fmt.Errorf("element %d is not the one the record names", r.Seq+i)
		}
		if err := dec(p); err != nil {
			return nil, fmt.Errorf("element %d: %w", r.Seq+i, err)
		}
		k, v = c.Next()
	}
	return sums, nil
}

// Delete removes the agent's file and directory. It takes the file's lock
// first, so it fails with ErrLocked while another process runs the agent.
func (s *Store) Delete(ctx context.Context, agentID string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bbolt: delete %s: %w", agentID, err)
	}
	if err := agent.ValidateID(agentID); err != nil {
		return fmt.Errorf("bbolt: delete: %w", err)
	}
	a, err := s.agent(agentID)
	if err != nil {
		return fmt.Errorf("bbolt: delete %s: %w", agentID, err)
	}
	defer a.mu.Unlock()
	ok, err := s.open(a, false)
	switch {
	case errors.Is(err, plugin.ErrCorrupt):
		// Not a bbolt file: nobody can be running the agent on it (the
		// lock was free, or we would have got ErrLocked). Deleting it is
		// how an operator starts the agent afresh.
		s.log.Warn().Str("agent", agentID).Str("file", a.path).Err(err).Msg("deleting a corrupt store")
		return s.remove(a)
	case err != nil:
		return fmt.Errorf("bbolt: delete %s: %w", agentID, err)
	case !ok:
		return nil
	}
	return s.remove(a)
}

// remove unlinks the agent's file, while holding its lock when it is open so
// that no other process opens it between our check and the removal, then
// closes it and removes the agent's directory. a.mu is held.
func (s *Store) remove(a *agentStore) error {
	rmErr := os.Remove(a.path)
	var closeErr error
	_ = a.drop()
	if a.db != nil {
		closeErr = a.db.Close()
	}
	if err := os.Remove(journalPath(a.path)); err != nil && !errors.Is(err, fs.ErrNotExist) && rmErr == nil {
		rmErr = err
	}
	a.db, a.cache = nil, nil
	a.ids.Store(nil)
	if rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		return fmt.Errorf("bbolt: delete %s: %w", a.id, rmErr)
	}
	if closeErr != nil {
		return fmt.Errorf("bbolt: delete %s: %w", a.id, closeErr)
	}
	// A file a crash left half created (see create), and damaged files a
	// salvage kept, go with the agent.
	for _, prefix := range []string{tmpPrefix, damagedPrefix} {
		if tmps, err := filepath.Glob(filepath.Join(filepath.Dir(a.path), prefix+"*")); err == nil {
			for _, t := range tmps {
				_ = os.Remove(t)
			}
		}
	}
	// The directory goes too, unless someone left other files in it.
	if err := os.Remove(filepath.Dir(a.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Debug().Str("agent", a.id).Err(err).Msg("agent directory kept")
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("bbolt: delete %s: %w", a.id, err)
	}
	return nil
}

// List returns the ids of the agents that have a file, sorted.
func (s *Store) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bbolt: list: %w", err)
	}
	if s.agents.Closed() {
		return nil, fmt.Errorf("bbolt: list: %w", plugin.ErrClosed)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("bbolt: list: %w", err)
	}
	var ids []string // os.ReadDir sorts by name
	for _, e := range entries {
		if !e.IsDir() || agent.ValidateID(e.Name()) != nil {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(s.dir, e.Name(), FileName)); err == nil && fi.Mode().IsRegular() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Close closes every agent's file, releasing its lock. Later calls of any
// method fail with ErrClosed; a second Close returns nil.
func (s *Store) Close() error {
	agents, first := s.agents.Close()
	if !first {
		return nil
	}
	var errs []error
	for _, a := range agents {
		a.mu.Lock()
		a.closed = true
		if a.db != nil {
			if err := s.end(a); err != nil {
				errs = append(errs, fmt.Errorf("bbolt: close %s: the journal's last saves stay in the journal: %w", a.id, err))
			}
			if err := a.db.Close(); err != nil {
				errs = append(errs, fmt.Errorf("bbolt: close %s: %w", a.id, err))
			}
			a.db, a.cache = nil, nil
			a.ids.Store(nil)
		}
		a.mu.Unlock()
	}
	return errors.Join(errs...)
}
