package bbolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Salvage: rebuilding a state.db whose structure is damaged.
//
// bbolt keeps no second copy of its tree: one zeroed branch page, a meta
// page that fails its checksum, a file cut short, and bbolt can no longer
// find pages that are intact. But every value this store writes is a frame
// whose CRC-32C covers its key (record.go), and every key says by its shape
// which bucket it belongs to. So a file that fails the checks before bbolt
// maps it (checkFile, bolt.Open, tx.Check), or whose buckets are not the
// ones this store writes, is read page by page instead: every leaf page of
// the file, reachable or not, gives up the values whose frames check. Where
// one key has several values (a page freed by copy on write keeps an older
// one), the value of a page reachable from the newest meta page wins; the
// elements of the lists, the generation records and the task index are
// written once per key, so a freed page mostly holds copies of the same
// values or of values since deleted.
//
// What the damaged pages held is lost, and only that: the generations whose
// records check are written, with the lists and the task index, into a new
// file (created whole under a temporary name, like a new agent's), the
// damaged file is kept beside it as state.db.damaged-{time} for inspection,
// and the new file takes the name state.db. The newest generation becomes
// the mark's (readGeneration then leaves out of it, and says so, the
// elements the damage took), the task count is counted again, and the
// journal's mark is the number the store held (or, when the page holding it
// is the damaged one, what the journal itself shows): the journal's records
// after it are replayed as on any start. A file with no generation record
// left is refused, as before, and left as it was.
//
// Salvage runs only on a damaged file: a Save never pays for it.

// damagedPrefix starts the name a damaged state.db is kept under.
const damagedPrefix = FileName + ".damaged-"

// structureError is a refusal that a salvage may answer: the file's
// structure is damaged (its pages, or the buckets it holds). It wraps an
// error wrapping plugin.ErrCorrupt.
type structureError struct{ error }

func (e structureError) Unwrap() error { return e.error }

// salvageReport is what a salvage found, for its log line.
type salvageReport struct {
	pages, leaves int    // pages read, leaf pages among them
	values, tasks int    // values kept, task index entries among them
	gens          int    // generation records kept
	newest        uint64 // the newest generation
	folded        uint64 // the journal mark written
	foldedFrom    string // where that mark came from
	kept          string // the name the damaged file is kept under
}

// salvager reads the values out of one damaged file.
type salvager struct {
	buf    []byte
	ps     int
	npages uint64
	live   map[uint64]bool
	vals   map[string]sval // bucket id byte + key → value
	// folded: the journal marks found, in a reachable page and in any.
	foldedLive, foldedAny uint64
	liveFolded            bool
	leaves                int
}

type sval struct {
	v    []byte
	live bool
}

// salvageFile reads the damaged file at path.
func salvageFile(path string) (*salvager, error) {
	buf, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// Without a meta page that checks, the page size bbolt creates files
	// with: the system's.
	s := &salvager{buf: buf, live: map[uint64]bool{}, vals: map[string]sval{}, ps: os.Getpagesize()}
	var metas []bmeta
	for _, off := range []int{0, 1024, 2048, 4096, 8192, 16384, 32768, 65536} {
		if off+pageHeaderSize+metaLen+8 > len(buf) {
			break
		}
		if m := parseMeta(buf[off:]); m.err == nil && (off == 0 || int(m.pageSize) == off) {
			metas = append(metas, m)
		}
	}
	if len(metas) > 0 {
		s.ps = int(metas[0].pageSize)
	}
	s.npages = uint64(len(buf) / s.ps)
	// The pages reachable from the newest meta page that checks: their
	// values win over those of freed pages.
	sort.Slice(metas, func(i, j int) bool { return metas[i].txid > metas[j].txid })
	if len(metas) > 0 && int(metas[0].pageSize) == s.ps {
		s.walk(metas[0].root, 0)
	}
	for id := uint64(2); id < s.npages; id++ {
		p := s.page(id)
		if p == nil || ne.Uint16(p[8:]) != flagLeaf {
			continue
		}
		s.leaves++
		s.leaf(p, s.live[id], 0)
	}
	return s, nil
}

// page returns page id with its overflow pages, or nil when it is not
// where its header says or runs past the file.
func (s *salvager) page(id uint64) []byte {
	if id < 2 || id >= s.npages {
		return nil
	}
	p := s.buf[id*uint64(s.ps):]
	if ne.Uint64(p) != id {
		return nil
	}
	over := uint64(ne.Uint32(p[12:]))
	if over >= s.npages-id {
		return nil
	}
	return p[:(1+over)*uint64(s.ps)]
}

// walk marks the pages reachable from page id, skipping what is damaged.
func (s *salvager) walk(id uint64, depth int) {
	if depth > maxDepth || s.live[id] {
		return
	}
	p := s.page(id)
	if p == nil {
		return
	}
	s.live[id] = true
	s.elems(p, func(flags uint32, k, v []byte, child uint64) {
		switch {
		case child != 0:
			s.walk(child, depth+1)
		case flags&bucketFlag != 0 && len(v) >= bucketHeader && ne.Uint64(v) != 0:
			s.walk(ne.Uint64(v), depth+1)
		}
	})
}

// elems calls fn for every element of the branch or leaf page p that lies
// inside it: for a branch, with the child's page id.
func (s *salvager) elems(p []byte, fn func(flags uint32, k, v []byte, child uint64)) {
	if len(p) < pageHeaderSize {
		return
	}
	flags, count := ne.Uint16(p[8:]), uint64(ne.Uint16(p[10:]))
	if flags != flagBranch && flags != flagLeaf {
		return
	}
	for i := uint64(0); i < count && pageHeaderSize+(i+1)*elemSize <= uint64(len(p)); i++ {
		off := pageHeaderSize + i*elemSize
		e := p[off : off+elemSize]
		if flags == flagBranch {
			pos, ksize := uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
			if off+pos+ksize <= uint64(len(p)) {
				fn(0, p[off+pos:off+pos+ksize], nil, ne.Uint64(e[8:]))
			}
			continue
		}
		pos, ksize, vsize := uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		if start := off + pos; start+ksize+vsize <= uint64(len(p)) {
			fn(ne.Uint32(e[0:]), p[start:start+ksize], p[start+ksize:start+ksize+vsize], 0)
		}
	}
}

// leaf takes the values of the leaf page p, and of the inline buckets in it.
func (s *salvager) leaf(p []byte, live bool, depth int) {
	s.elems(p, func(flags uint32, k, v []byte, _ uint64) {
		if flags&bucketFlag == 0 {
			s.take(k, v, live)
			return
		}
		if depth == 0 && len(v) >= bucketHeader+pageHeaderSize && ne.Uint64(v) == 0 {
			s.leaf(v[bucketHeader:], live, depth+1)
		}
	})
}

// take keeps the value v of key k if its frame checks, in the bucket the
// key's shape names (record.go, tasks.go).
func (s *salvager) take(k, v []byte, live bool) {
	p, err := openFrame(k, v)
	if err != nil || len(k) == 0 {
		return
	}
	var bucket byte
	switch {
	case len(k) == 1 && k[0] == keyFolded[0]:
		if len(p) == 8 {
			n := binary.BigEndian.Uint64(p)
			s.foldedAny = max(s.foldedAny, n)
			if live {
				s.foldedLive, s.liveFolded = max(s.foldedLive, n), true
			}
		}
		return
	case len(k) == 1:
		return // the generation mark, the task count, the marked key: written anew
	case len(k) == 9 && (k[0] == prefixRecent || k[0] == prefixHistory || k[0] == prefixOutbox ||
		k[0] == prefixQueue || k[0] == prefixRecord):
		bucket = 's'
	case k[0] == prefixTaskByID || k[0] == prefixTaskByTime && len(k) == 17:
		bucket = 't'
	default:
		return
	}
	id := string(append([]byte{bucket}, k...))
	if old, ok := s.vals[id]; ok && (old.live || !live) {
		return
	}
	s.vals[id] = sval{v: v, live: live}
}

// salvage rebuilds the agent's damaged file (why says what is wrong with
// it) from what salvageFile reads in it, as the top of this file says, and
// returns nil when the new file is in place. It fails, leaving the file as
// it was, when no generation record is left in it. a.mu is held and a.db
// is nil.
func (s *Store) salvage(a *agentStore, why error) (err error) {
	unlock, err := lockFile(a.path, s.opts.LockTimeout)
	if err != nil {
		if errors.Is(err, errLockBusy) {
			return &lockedError{id: a.id, path: a.path}
		}
		return err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	defer catchDamage(a.path, &err)()
	sv, err := salvageFile(a.path)
	if err != nil {
		return err
	}
	rep := salvageReport{pages: int(sv.npages), leaves: sv.leaves}

	// The generation records that check and are this agent's.
	var gens []uint64
	var taskKeys int
	for id, v := range sv.vals {
		k := []byte(id[1:])
		switch {
		case id[0] == 's' && k[0] == prefixRecord:
			rec, err := decodeRecord(k, v.v)
			if err != nil || rec.Snap.AgentID != a.id {
				delete(sv.vals, id)
				continue
			}
			gens = append(gens, rec.Gen)
		case id[0] == 't' && k[0] == prefixTaskByTime:
			taskKeys++
		}
		if id[0] == 't' && k[0] == prefixTaskByID {
			rep.tasks++
		}
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] > gens[j] })
	rep.gens, rep.values = len(gens), len(sv.vals)
	var base uint64
	if len(gens) > 0 {
		rep.newest = gens[0]
	}
	if len(gens) > 1 {
		base = gens[1]
	}
	jnum, jgen, jtop, jok := firstJournalRecord(journalPath(a.path))
	if len(gens) == 0 && (!jok || sv.liveFolded && jnum != sv.foldedLive+1) {
		// Nothing to load: no generation record here, and none the
		// journal would replay.
		return fmt.Errorf("%s is damaged (%v), and none of its generation records is readable: %w", a.path, why, plugin.ErrCorrupt)
	}

	// The journal's mark: the one a reachable page holds, else what the
	// journal shows (the first record at its start, when it holds a
	// generation newer than every record salvaged, follows the mark), else
	// the highest any freed page holds.
	rep.folded, rep.foldedFrom = sv.foldedLive, "the store"
	if !sv.liveFolded {
		rep.folded, rep.foldedFrom = sv.foldedAny, "an older copy in the store"
		switch {
		case !jok:
		case jgen > rep.newest:
			// A save after the newest generation salvaged: the first
			// record after the last fold.
			rep.folded, rep.foldedFrom = jnum-1, "the journal"
		default:
			// Folded: no record was written since the last fold, and
			// every record in the journal is folded.
			rep.folded, rep.foldedFrom = max(rep.folded, jtop), "the journal"
		}
	}

	// The new file, created whole under a temporary name.
	dir := filepath.Dir(a.path)
	name, db, err := s.openTemp(dir)
	defer os.Remove(name)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(sv.vals))
	for id := range sv.vals {
		keys = append(keys, id)
	}
	sort.Strings(keys)
	err = db.Update(func(tx *bolt.Tx) error {
		sb, err := tx.CreateBucket(bucketSnapshot)
		if err != nil {
			return err
		}
		sb.FillPercent = s.tune.fillPercent
		var tb *bolt.Bucket
		for _, id := range keys {
			b := sb
			if id[0] == 't' {
				if tb == nil {
					if tb, err = tx.CreateBucket(bucketTasks); err != nil {
						return err
					}
					tb.FillPercent = s.tune.fillPercent
				}
				b = tb
			}
			if err := b.Put([]byte(id[1:]), sv.vals[id].v); err != nil {
				return err
			}
		}
		if err := sb.Put(keyMarked, appendFrame(nil, keyMarked, nil)); err != nil {
			return err
		}
		if tb != nil {
			k := []byte{keyTaskCount}
			if err := tb.Put(k, appendFrame(nil, k, binary.BigEndian.AppendUint64(nil, uint64(taskKeys)))); err != nil {
				return err
			}
		}
		mb, err := tx.CreateBucket(bucketMark)
		if err != nil {
			return err
		}
		if rep.newest > 0 {
			// Otherwise the journal's first record, which every start
			// replays, writes it.
			p := binary.BigEndian.AppendUint64(nil, rep.newest)
			p = binary.BigEndian.AppendUint64(p, base)
			var flags byte
			if tb != nil {
				flags = 1
			}
			if err := mb.Put(keyMark, appendFrame(nil, keyMark, append(p, flags))); err != nil {
				return err
			}
		}
		return mb.Put(keyFolded, appendFrame(nil, keyFolded, binary.BigEndian.AppendUint64(nil, rep.folded)))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("salvaging %s: %w", a.path, err)
	}

	// The damaged file keeps its bytes under a name of its own; the new
	// one takes its place in one rename.
	kept := ""
	for i := 0; ; i++ {
		kept = filepath.Join(dir, damagedPrefix+time.Now().UTC().Format("20060102T150405Z"))
		if i > 0 {
			kept += fmt.Sprintf("-%d", i)
		}
		err := os.Link(a.path, kept)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return fmt.Errorf("keeping the damaged %s: %w", a.path, err)
		}
	}
	if renameNeedsClose {
		// Windows does not replace a file that is open.
		unlock()
		locked = false
	}
	if err := os.Rename(name, a.path); err != nil {
		_ = os.Remove(kept)
		return fmt.Errorf("salvaging %s: %w", a.path, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	rep.kept = kept
	s.log.Error().Str("agent", a.id).Str("file", a.path).Str("kept", kept).AnErr("damage", why).
		Int("pages", rep.pages).Int("leaf_pages", rep.leaves).Int("values", rep.values).Int("tasks", rep.tasks).
		Int("generations", rep.gens).Uint64("generation", rep.newest).Uint64("journal_mark", rep.folded).
		Msgf("state.db is damaged: rebuilt from the values its readable pages hold (%d values, %d task results, newest generation %d; journal mark %d from %s); what the damaged pages held is lost, the damaged file is kept as %s",
			rep.values, rep.tasks, rep.newest, rep.folded, rep.foldedFrom, filepath.Base(kept))
	return nil
}

// firstJournalRecord returns the number of the record at the start of the
// journal at path and the generation its save wrote, when it checks, and
// the highest number of a good record in the journal.
func firstJournalRecord(path string) (num, gen, top uint64, ok bool) {
	buf, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, false
	}
	for i := 0; i <= len(buf)-journalHeader; i++ {
		if _, n, seq, ok := recordAt(buf, i); ok {
			top = max(top, seq)
			i += n - 1
		}
	}
	ops, _, seq, ok := recordAt(buf, 0)
	if !ok {
		return 0, 0, 0, false
	}
	found := false
	_ = eachOp(ops, func(kind byte, bucket, k, v []byte) error {
		if kind == opPut && string(bucket) == string(bucketMark) && string(k) == string(keyMark) {
			if p, err := openFrame(k, v); err == nil && len(p) >= 8 {
				gen, found = binary.BigEndian.Uint64(p), true
			}
		}
		return nil
	})
	return seq, gen, top, found
}
