package bbolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// The journal: what makes most Saves cost one or two pages of the disk.
//
// A bbolt commit writes every page it changed, and every page above them,
// at new places (copy on write), then the meta page: ten to twelve 4 KiB
// pages for one task on an agent with a working task index
// (docs/wear.md). So a Save that continues the previous one does not
// commit. Its changes, the puts and deletes of its transaction, are
// appended as one record to the agent's journal, {dir}/{id}/state.journal,
// and one fdatasync of the journal makes them durable: that is the Save's
// commit point. The bbolt transaction stays open and holds them; every
// read of the agent (Load, TaskResult) goes through it. When the next
// record does not fit the journal, the transaction is committed with
// bbolt's two syncs (a fold), together with the number of the last record
// it holds (key 'j' of the mark bucket), and the journal starts again at
// its beginning. A page that many Saves change is written once a fold.
//
// Opening the file replays, into a new transaction, the records that
// follow the folded number. Records are read from offset 0; each must carry
// the next number and a good CRC-32C. The first one that does not ends the
// journal: the record a crash cut short, or one left from before the last
// fold (its number is not above the folded one), or the fill of a new
// journal. A good record with a higher number found after that end means
// the journal was damaged in between: the Saves after the damage are lost,
// and opening says so with an error-level log line; the agent goes on from
// the last good one. The end says so at warning level when it looks like
// damage rather than the place the next record goes: a record with the
// next number that does not check (a power cut while it was written, or
// damage), a 4 KiB page of zeros (which the journal never holds: it is
// created filled with 0xff), or a file shorter than the journal. Replaying
// writes nothing.
//
// The first Save after opening, unless it follows a Load (the store does
// not know the previous generation), every Save too large for the journal,
// and the first Save on a file of a version without the journal (so that
// its mark exists before any record does) commit to bbolt directly, as
// Saves did before the journal: an agent's first Save is in state.db
// itself, so a damaged journal can cost the last Saves, never the agent.
//
// The journal file has its whole size from its creation (0xff, synced,
// and its name synced in the directory), so that a Save's fdatasync never
// has to write the file's size or its blocks' map.

// JournalName is the name of an agent's journal inside its directory.
const JournalName = "state.journal"

// defaultJournalSize is the journal's size: the bytes of records between
// two folds. An echo task's record is about 1.5 KiB, so a fold comes every
// 170 tasks or so. 128 KiB (a fold every eighty tasks) cost 9.0 KiB of
// block writes per task (BenchmarkBlockBytes), 256 KiB costs 8.8 KiB: a
// fold writes mostly what its tasks added, and its fixed part (the pages
// above those, the meta page) is shared by twice the tasks.
const defaultJournalSize = 256 << 10

// maxKeptLog is the largest operations buffer a store keeps for its next
// Save: one that could still fit in a journal of the default size.
const maxKeptLog = defaultJournalSize

// idleKeptLog is the largest operations buffer a store keeps after a Save
// that fitted in the journal.
const idleKeptLog = 32 << 10

// A record is a header and the operations of one Save:
//
//	4 bytes  CRC-32C (Castagnoli) of everything after it
//	4 bytes  length of the operations, big endian
//	8 bytes  the record's number, big endian, from 1
//	         the operations
//
// An operation is a kind ('p' put, 'd' delete, 'c' create the bucket), the
// bucket (bucketID), then the key and, for a put, the value, each as a
// uvarint length and the bytes.
const journalHeader = 16

const (
	opPut    byte = 'p'
	opDelete byte = 'd'
	opCreate byte = 'c'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// keyFolded, in the mark bucket: the number of the last journal record
// that state.db holds (8 bytes big endian), framed.
var keyFolded = []byte{'j'}

// bucketID is the byte an operation names bucket name with.
func bucketID(name []byte) (byte, error) {
	switch string(name) {
	case string(bucketSnapshot):
		return 's', nil
	case string(bucketTasks):
		return 't', nil
	case string(bucketMark):
		return 'm', nil
	}
	return 0, fmt.Errorf("no journal id for bucket %q", name)
}

func bucketOfID(id byte) []byte {
	switch id {
	case 's':
		return bucketSnapshot
	case 't':
		return bucketTasks
	case 'm':
		return bucketMark
	}
	return nil
}

// opLog collects the operations of one Save. Operations that outgrow
// limit can never go to the journal, and a fold commits them instead: the
// log then stops collecting them (over), rather than copy a large Save (a
// burst of tasks made durable at once) for nothing.
type opLog struct {
	b     []byte
	limit int64 // bytes; the log is over past them (0: no limit)
	over  bool  // the operations are not all in b: the Save must fold
}

func (l *opLog) add(kind, bucket byte, k, v []byte) {
	if l.over {
		return
	}
	// An operation that would take the log past its limit is not
	// appended, and the buffer grows at most to the limit: so it never
	// outgrows what the next Save keeps (maxKeptLog), instead of growing
	// afresh, by doubling, in every Save of a burst too large for the
	// journal.
	if l.limit > 0 {
		need := len(l.b) + opSize(k, v, kind)
		if int64(need) > l.limit {
			l.over, l.b = true, l.b[:0]
			return
		}
		if need > cap(l.b) {
			nb := make([]byte, len(l.b), min(max(2*cap(l.b), need, 4096), int(l.limit)))
			l.b = nb[:copy(nb, l.b)]
		}
	}
	l.b = append(l.b, kind, bucket)
	l.b = binary.AppendUvarint(l.b, uint64(len(k)))
	l.b = append(l.b, k...)
	if kind == opPut {
		l.b = binary.AppendUvarint(l.b, uint64(len(v)))
		l.b = append(l.b, v...)
	}
}

// opSize is the size of an operation in the log.
func opSize(k, v []byte, kind byte) int {
	n := 2 + uvarintLen(uint64(len(k))) + len(k)
	if kind == opPut {
		n += uvarintLen(uint64(len(v))) + len(v)
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// wtx is Save's transaction: what it changes is also logged for the
// journal.
type wtx struct {
	*bolt.Tx
	log *opLog
}

// wbucket is a bucket of a wtx.
type wbucket struct {
	*bolt.Bucket
	id  byte
	log *opLog
}

func (b *wbucket) Put(k, v []byte) error {
	if err := b.Bucket.Put(k, v); err != nil {
		return err
	}
	b.log.add(opPut, b.id, k, v)
	return nil
}

func (b *wbucket) Delete(k []byte) error {
	if err := b.Bucket.Delete(k); err != nil {
		return err
	}
	b.log.add(opDelete, b.id, k, nil)
	return nil
}

// deleteAt deletes k, the key under c, a cursor of b.
func (b *wbucket) deleteAt(c *bolt.Cursor, k []byte) error {
	b.log.add(opDelete, b.id, k, nil) // before: k may be the node's, which Delete drops
	return c.Delete()
}

// bucket returns the bucket name, nil when it does not exist.
func (t wtx) bucket(name []byte) *wbucket {
	b := t.Tx.Bucket(name)
	if b == nil {
		return nil
	}
	id, _ := bucketID(name)
	return &wbucket{Bucket: b, id: id, log: t.log}
}

// createBucketIfNotExists returns the bucket name, creating it if needed.
func (t wtx) createBucketIfNotExists(name []byte) (*wbucket, error) {
	if b := t.bucket(name); b != nil {
		return b, nil
	}
	id, err := bucketID(name)
	if err != nil {
		return nil, err
	}
	b, err := t.Tx.CreateBucket(name)
	if err != nil {
		return nil, err
	}
	t.log.add(opCreate, id, name, nil)
	return &wbucket{Bucket: b, id: id, log: t.log}, nil
}

// eachOp calls fn for every operation of ops, in order, and fails on the
// first that does not decode or that bbolt would refuse (an empty key, a
// key or value too long).
func eachOp(ops []byte, fn func(kind byte, bucket, k, v []byte) error) error {
	field := func(max int) ([]byte, error) {
		n, w := binary.Uvarint(ops)
		if w <= 0 || n > uint64(max) || n > uint64(len(ops)-w) {
			return nil, errors.New("an operation is cut short or too long")
		}
		f := ops[w : w+int(n)]
		ops = ops[w+int(n):]
		return f, nil
	}
	for len(ops) > 0 {
		if len(ops) < 2 {
			return errors.New("an operation is cut short")
		}
		kind, id := ops[0], ops[1]
		bucket := bucketOfID(id)
		ops = ops[2:]
		if bucket == nil {
			return fmt.Errorf("an operation on an unknown bucket %q", id)
		}
		k, err := field(bolt.MaxKeySize)
		if err != nil {
			return err
		}
		var v []byte
		switch kind {
		case opPut:
			if len(k) == 0 {
				return errors.New("a put without a key")
			}
			if v, err = field(bolt.MaxValueSize); err != nil {
				return err
			}
		case opDelete:
			if len(k) == 0 {
				return errors.New("a delete without a key")
			}
		case opCreate:
		default:
			return fmt.Errorf("an operation of unknown kind %q", kind)
		}
		if err := fn(kind, bucket, k, v); err != nil {
			return err
		}
	}
	return nil
}

// applyOps applies the operations of one record to tx, whole or (when they
// do not decode) not at all.
func applyOps(tx *bolt.Tx, ops []byte, t *tuning) error {
	if err := eachOp(ops, func(byte, []byte, []byte, []byte) error { return nil }); err != nil {
		return err
	}
	return eachOp(ops, func(kind byte, name, k, v []byte) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		switch string(name) {
		case string(bucketSnapshot):
			b.FillPercent = t.fillPercent
		case string(bucketTasks):
			b.FillPercent = t.indexFill
		}
		switch kind {
		case opPut:
			// bbolt keeps key and value until the commit: ops is the
			// record's own copy, never reused.
			return b.Put(k, v)
		case opDelete:
			return b.Delete(k)
		}
		return nil
	})
}

// appendRecord appends the record numbered seq of ops to dst.
func appendRecord(dst []byte, seq uint64, ops []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, journalHeader)...)
	binary.BigEndian.PutUint32(dst[start+4:], uint32(len(ops)))
	binary.BigEndian.PutUint64(dst[start+8:], seq)
	dst = append(dst, ops...)
	binary.BigEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// recordAt returns the operations and the length of a good record at off
// in buf, whatever its number, and the number.
func recordAt(buf []byte, off int) (ops []byte, n int, seq uint64, ok bool) {
	if off < 0 || len(buf)-off < journalHeader {
		return nil, 0, 0, false
	}
	h := buf[off:]
	size := binary.BigEndian.Uint32(h[4:])
	seq = binary.BigEndian.Uint64(h[8:])
	if seq == 0 || uint64(size) > uint64(len(h)-journalHeader) {
		return nil, 0, 0, false
	}
	n = journalHeader + int(size)
	if crc32.Checksum(h[4:n], castagnoli) != binary.BigEndian.Uint32(h) {
		return nil, 0, 0, false
	}
	return h[journalHeader:n], n, seq, true
}

// journal is an agent's open journal.
type journal struct {
	path string
	f    *os.File // nil until the first record is written, if the file did not exist
	size int64    // the file's size: no record goes past it
	off  int64    // where the next record goes
	next uint64   // the number of the next record
	buf  []byte   // the record being written, reused
	// appended is set once this process wrote a record; pages counts the
	// 4 KiB pages of the file its records touched, each of which a Save's
	// sync writes.
	appended bool
	pages    int64
}

// journalPath returns the journal beside the agent's file dbPath.
func journalPath(dbPath string) string { return filepath.Join(filepath.Dir(dbPath), JournalName) }

// replayed is what readJournal found.
type replayed struct {
	recs [][]byte // the operations of the records to replay, in order
	// nums is the number of each record of recs when the journal was
	// damaged between records (resumed is set); nil otherwise, when they
	// are numbered one after the other from folded+1.
	nums []uint64
	// resumed is the number of the first good record found after damage
	// in the middle of the journal (0: none): the reader resynced there.
	// lost is then the number of records the damage took: the numbers
	// missing between the records replayed.
	resumed uint64
	lost    uint64
	after   int // the records replayed from resumed on
	// end is the offset after the last replayed record.
	end int64
	// torn is set when a record with the next number starts at end but
	// does not check: cut short by a power cut while it was written, or
	// damaged (its number too, when the rest checks with the next one).
	torn bool
	// zeroed is the offset of a 4 KiB page of zeros at or after end, or -1.
	zeroed int64
	// short is the file's size when it is smaller than the journal's: it
	// was cut short.
	short int64
	// top is the highest number of any good record in the file.
	top uint64
}

// readJournal opens the journal at path, if it exists, and reads the
// records that follow number folded.
func readJournal(path string, folded uint64, size int64) (*journal, *replayed, error) {
	j := &journal{path: path, size: size, next: folded + 1}
	r := &replayed{top: folded, zeroed: -1}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return j, r, nil
	case err != nil:
		return nil, nil, err
	case !fi.Mode().IsRegular():
		return nil, nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := openFile(path, os.O_RDWR, privfs.FileMode)
	if err != nil {
		return nil, nil, err
	}
	// A record a killed process wrote but did not sync is in the page
	// cache: replayed and built on, it must not be lost to a power cut
	// afterwards (see open).
	if err := datasync(f); err != nil {
		f.Close()
		return nil, nil, err
	}
	buf, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	dropCache(f)
	j.f = f
	j.size = max(size, int64(len(buf)))
	off := 0
	for {
		ops, n, seq, ok := recordAt(buf, off)
		if !ok || seq != j.next {
			break
		}
		r.recs = append(r.recs, ops)
		off += n
		j.next++
	}
	r.end = int64(off)
	r.top = max(r.top, j.next-1)
	r.torn = tornAt(buf, off, j.next)
	for p := off / journalPage * journalPage; p+journalPage <= len(buf); p += journalPage {
		if isZero(buf[p : p+journalPage]) {
			r.zeroed = int64(p)
			break
		}
	}
	if int64(len(buf)) < size {
		r.short = int64(len(buf))
	}
	// What follows is a record cut short, zeros or older records, unless
	// the journal was damaged: then good records with higher numbers follow,
	// and the reader resyncs on them (a record is found by its checksum,
	// wherever it starts) and replays them too.
	last := j.next - 1 // the number of the last record replayed
	for i := off + 1; i <= len(buf)-journalHeader; i++ {
		ops, n, seq, ok := recordAt(buf, i)
		if !ok {
			continue
		}
		r.top = max(r.top, seq)
		if seq > last {
			if r.resumed == 0 {
				r.resumed = seq
				for k := range r.recs {
					r.nums = append(r.nums, folded+1+uint64(k))
				}
			}
			r.lost += seq - last - 1
			r.recs = append(r.recs, ops)
			r.nums = append(r.nums, seq)
			r.after++
			last = seq
		}
		i += n - 1
	}
	j.off = r.end
	return j, r, nil
}

// journalPage is the page the journal's damage checks look at.
const journalPage = 4096

// tornAt reports whether a record numbered next starts at off in buf but
// does not check, or checks only with its number set to next.
func tornAt(buf []byte, off int, next uint64) bool {
	if len(buf)-off < journalHeader {
		return false
	}
	h := buf[off:]
	if binary.BigEndian.Uint64(h[8:]) == next {
		return true
	}
	size := binary.BigEndian.Uint32(h[4:])
	if uint64(size) > uint64(len(h)-journalHeader) {
		return false
	}
	c := crc32.Update(0, castagnoli, h[4:8])
	c = crc32.Update(c, castagnoli, binary.BigEndian.AppendUint64(nil, next))
	c = crc32.Update(c, castagnoli, h[journalHeader:journalHeader+int(size)])
	return c == binary.BigEndian.Uint32(h)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// append writes the record of ops under the next number and makes it
// durable, waiting for the sync in the poller when polled
// (datasyncPolled). It does not check that the record fits.
func (j *journal) append(ops []byte, polled bool) error {
	if j.f == nil {
		if err := j.create(); err != nil {
			return err
		}
	}
	j.buf = appendRecord(j.buf[:0], j.next, ops)
	if _, err := j.f.WriteAt(j.buf, j.off); err != nil {
		return err
	}
	sync := datasync
	if polled {
		sync = datasyncPolled
	}
	if err := sync(j.f); err != nil {
		return err
	}
	j.pages += (j.off+int64(len(j.buf))-1)/4096 - j.off/4096 + 1
	j.off += int64(len(j.buf))
	j.next++
	j.appended = true
	return nil
}

// fits reports whether a record of n bytes of operations fits after the
// records written.
func (j *journal) fits(n int) bool { return j.off+journalHeader+int64(n) <= j.size }

// create makes the journal file at its whole size, filled with 0xff (so
// that a page of zeros in it is damage), synced, with its name synced in
// its directory.
func (j *journal) create() error {
	f, err := openFile(j.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, privfs.FileMode)
	if err != nil {
		return err
	}
	// Filled 32 KiB at a time: a buffer of the journal's size would be
	// garbage for the agent's heap to grow by.
	fill := make([]byte, min(j.size, 32<<10))
	for i := range fill {
		fill[i] = 0xff
	}
	for off := int64(0); off < j.size; off += int64(len(fill)) {
		if _, err := f.WriteAt(fill[:min(int64(len(fill)), j.size-off)], off); err != nil {
			f.Close()
			os.Remove(j.path)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(j.path)
		return err
	}
	dropCache(f)
	if err := atomicfile.SyncDir(filepath.Dir(j.path)); err != nil {
		f.Close()
		return err
	}
	j.f = f
	return nil
}

// close closes the journal's file.
func (j *journal) close() error {
	if j == nil || j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// errNoFolded: a store that was saved to has no journal mark.
var errNoFolded = errors.New("the store has no journal mark")

// readFolded returns the number of the last journal record state.db holds.
func readFolded(mb *bolt.Bucket) (uint64, error) {
	if mb == nil {
		return 0, nil
	}
	v := mb.Get(keyFolded)
	if v == nil {
		return 0, nil
	}
	p, err := openFrame(keyFolded, v)
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: a folded number of %d bytes", errBadFrame, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// putFolded records in tx that state.db holds every journal record up to
// number n.
func putFolded(tx *bolt.Tx, n uint64) error {
	mb, err := tx.CreateBucketIfNotExists(bucketMark)
	if err != nil {
		return err
	}
	return mb.Put(keyFolded, appendFrame(nil, keyFolded, binary.BigEndian.AppendUint64(nil, n)))
}
