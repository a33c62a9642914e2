package bbolt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
)

// Layout of one agent's file. Everything of the snapshot lives in one bucket
// so that a Save dirties as few pages as possible; the key's first byte says
// what the value is, and the prefixes sort so that the tail of each list and
// the generation records are neighbours:
//
//	snapshot bucket
//	  'e' + 8-byte big-endian key   one recent event id (its bytes), framed
//	  'h' + 8-byte big-endian key   one history message (contract JSON), framed
//	  'o' + 8-byte big-endian key   one outbox result (contract JSON), framed
//	  'q' + 8-byte big-endian key   one queued event (contract JSON), framed
//	  'r' + 8-byte big-endian gen   a generation record (see record), framed
//	tasks bucket
//	  'i' + task_id                 8-byte result seq + the Result's JSON, framed
//	  't' + 8-byte ms + 8-byte seq  the task_id finished then, framed
//	  'u'                           8-byte count of the 't' entries, framed
//	                                (after the last 't' key, so that a Save
//	                                writes it in the page it appends to;
//	                                files of older versions have it as 'n')
//
// The element keys are internal to this backend: a record maps them to the
// kernel's positions (Snapshot.HistorySeq, QueueSeq, RecentSeq, and the Seq
// of the first result for the outbox), so that a history the
// kernel replaced wholesale can be written under fresh keys while the
// previous generation still points at the old ones.
var (
	bucketSnapshot = []byte("snapshot")
	bucketTasks    = []byte("tasks")
)

const (
	prefixRecent  byte = 'e'
	prefixHistory byte = 'h'
	prefixOutbox  byte = 'o'
	prefixQueue   byte = 'q'
	prefixRecord  byte = 'r'

	prefixTaskByID   byte = 'i'
	prefixTaskByTime byte = 't'
	keyTaskCount     byte = 'u'
	keyTaskCountOld  byte = 'n' // before the count moved after the 't' keys
)

// Every value this backend stores is a frame of storage/internal/backend
// (backend.AppendFrame): a CRC-32C of key and value, the payload's length,
// the payload. Covering the key means a value found under the wrong key
// fails too.
const frameHeader = backend.FrameHeader

// errBadFrame is the cause of every frame that fails its checks; Load turns
// it into a skipped generation or plugin.ErrCorrupt.
var errBadFrame = errors.New("bad frame")

// appendFrame appends the frame of payload stored under key to dst.
func appendFrame(dst, key, payload []byte) []byte { return backend.AppendFrame(dst, key, payload) }

// newFrame returns the start of a frame: its header, to which the payload
// is appended before sealFrame completes it.
func newFrame() []byte { return make([]byte, frameHeader) }

// sealFrame completes the frame f (newFrame and its payload) stored under
// key: appendFrame's frame, without a copy of the payload.
func sealFrame(f, key []byte) []byte { return backend.SealFrame(f, key) }

// openFrame checks the frame stored under key and returns its payload,
// which aliases value; its errors wrap errBadFrame.
func openFrame(key, value []byte) ([]byte, error) {
	p, err := backend.OpenFrame(key, value)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadFrame, err)
	}
	return p, nil
}

// sum is the checksum of one element's payload kept in listRange.LastSum.
func sum(payload []byte) uint32 { return backend.Sum(payload) }

// key returns prefix followed by n in big-endian.
func key(prefix byte, n uint64) []byte {
	var k [9]byte
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], n)
	return k[:]
}

// keyNum returns the number of a key made by key, and false for any other key
// of the prefix.
func keyNum(prefix byte, k []byte) (uint64, bool) {
	if len(k) != 9 || k[0] != prefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// listRange places one of the snapshot's lists (the history, the queue, the
// outbox or the recent event ids) in the file: element i of the list is
// stored under key Start+i.
type listRange struct {
	Seq     uint64 // kernel position of element 0 (Snapshot.HistorySeq, QueueSeq, ...)
	Start   uint64 // backend key of element 0
	Count   uint64 // number of elements
	LastSum uint32 // sum of the last element's payload; 0 when Count is 0
	Nil     bool   // the list was nil rather than empty (Load gives back what Save got)
}

// end is the key after the last element.
func (r listRange) end() uint64 { return r.Start + r.Count }

// maxKey bounds element keys, so that Start+Count never overflows.
const maxKey = math.MaxUint64 / 2

// record is one generation of an agent's snapshot: the snapshot without its
// lists, and where those are.
type record struct {
	Gen     uint64
	History listRange
	Queue   listRange
	Outbox  listRange
	Recent  listRange
	// TaskNext is one more than the highest Result.Seq indexed in the task
	// index: results of the outbox with a Seq at least TaskNext are new.
	TaskNext uint64
	// Snap is the snapshot without its lists. Only decodeRecord sets it; the
	// per-agent cache leaves it nil.
	Snap *agent.Snapshot
	// inBody: the record is of version 1, whose body holds the outbox and
	// the recent event ids (Outbox and Recent are empty).
	inBody bool
}

const (
	recordVersion = 2
	// recordHeader is the binary part of a record's payload: version, Gen,
	// four listRanges (history, queue, outbox, recent ids) and TaskNext. The
	// contract JSON of the snapshot, without its lists, follows it.
	recordHeader = 1 + 8 + 4*rangeSize + 8
	rangeSize    = 8 + 8 + 8 + 4 + 1
	// recordHeaderV1 is the header of version 1, which stored only the
	// history and the queue as lists; it is still read.
	recordHeaderV1 = 1 + 8 + 2*rangeSize + 8
)

// encodeRecord appends the framed record r, with body the contract JSON of
// the snapshot without its lists, to dst.
func encodeRecord(dst []byte, r *record, body []byte) []byte {
	p := make([]byte, 0, recordHeader+len(body))
	p = append(p, recordVersion)
	p = binary.BigEndian.AppendUint64(p, r.Gen)
	p = appendRange(p, r.History)
	p = appendRange(p, r.Queue)
	p = appendRange(p, r.Outbox)
	p = appendRange(p, r.Recent)
	p = binary.BigEndian.AppendUint64(p, r.TaskNext)
	p = append(p, body...)
	return appendFrame(dst, key(prefixRecord, r.Gen), p)
}

func appendRange(p []byte, r listRange) []byte {
	p = binary.BigEndian.AppendUint64(p, r.Seq)
	p = binary.BigEndian.AppendUint64(p, r.Start)
	p = binary.BigEndian.AppendUint64(p, r.Count)
	p = binary.BigEndian.AppendUint32(p, r.LastSum)
	var flags byte
	if r.Nil {
		flags = 1
	}
	return append(p, flags)
}

func readRange(p []byte) (listRange, error) {
	r := listRange{
		Seq:     binary.BigEndian.Uint64(p[0:]),
		Start:   binary.BigEndian.Uint64(p[8:]),
		Count:   binary.BigEndian.Uint64(p[16:]),
		LastSum: binary.BigEndian.Uint32(p[24:]),
	}
	switch p[28] {
	case 0:
	case 1:
		r.Nil = true
	default:
		return r, fmt.Errorf("unknown list flags %#x", p[28])
	}
	switch {
	case r.Start > maxKey || r.Count > maxKey-r.Start:
		return r, fmt.Errorf("list keys %d+%d out of range", r.Start, r.Count)
	case r.Nil && r.Count != 0:
		return r, fmt.Errorf("nil list with %d elements", r.Count)
	case r.Count > math.MaxUint64-r.Seq:
		return r, fmt.Errorf("list positions %d+%d overflow", r.Seq, r.Count)
	}
	return r, nil
}

// decodeRecord checks and decodes the record stored under k. It never
// panics, whatever the bytes (FuzzDecodeRecord holds it to that).
func decodeRecord(k, value []byte) (*record, error) {
	gen, ok := keyNum(prefixRecord, k)
	if !ok {
		return nil, fmt.Errorf("%w: %x is not a record key", errBadFrame, k)
	}
	p, err := openFrame(k, value)
	if err != nil {
		return nil, err
	}
	if len(p) < 1 {
		return nil, fmt.Errorf("%w: empty record", errBadFrame)
	}
	header, ranges := recordHeader, 4
	switch p[0] {
	case recordVersion:
	case 1:
		header, ranges = recordHeaderV1, 2
	default:
		return nil, fmt.Errorf("%w: record version %d, this build reads 1 and %d", errBadFrame, p[0], recordVersion)
	}
	if len(p) < header {
		return nil, fmt.Errorf("%w: record of %d bytes, shorter than its header", errBadFrame, len(p))
	}
	r := &record{Gen: binary.BigEndian.Uint64(p[1:]), inBody: ranges == 2}
	if r.Gen != gen {
		return nil, fmt.Errorf("%w: record of generation %d stored as generation %d", errBadFrame, r.Gen, gen)
	}
	lists := []struct {
		name string
		r    *listRange
	}{{"history", &r.History}, {"queue", &r.Queue}, {"outbox", &r.Outbox}, {"recent event ids", &r.Recent}}
	for i, l := range lists[:ranges] {
		if *l.r, err = readRange(p[9+i*rangeSize:]); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errBadFrame, l.name, err)
		}
	}
	r.TaskNext = binary.BigEndian.Uint64(p[9+ranges*rangeSize:])
	var s agent.Snapshot
	if err := json.Unmarshal(p[header:], &s); err != nil {
		return nil, fmt.Errorf("%w: snapshot JSON: %v", errBadFrame, err)
	}
	// The lists live under their own keys; the body has them empty.
	if len(s.Memory.ShortTermHistory) != 0 || len(s.EventQueueBackup) != 0 {
		return nil, fmt.Errorf("%w: record holds a history or a queue", errBadFrame)
	}
	if !r.inBody && (len(s.Outbox) != 0 || len(s.RecentEventIDs) != 0) {
		return nil, fmt.Errorf("%w: record holds an outbox or recent event ids", errBadFrame)
	}
	s.Memory.ShortTermHistory, s.EventQueueBackup = nil, nil
	s.HistorySeq, s.QueueSeq = r.History.Seq, r.Queue.Seq
	if !r.inBody {
		s.Outbox, s.RecentEventIDs = nil, nil
		s.RecentSeq = r.Recent.Seq
	}
	r.Snap = &s
	return r, nil
}

// recordBody returns the contract JSON of s without its lists.
func recordBody(s *agent.Snapshot) ([]byte, error) {
	bare := *s
	bare.Memory.ShortTermHistory = nil
	bare.EventQueueBackup = nil
	bare.Outbox = nil
	bare.RecentEventIDs = nil
	return agent.Encode(&bare)
}

// The generation mark lives outside the snapshot bucket, in a bucket of its
// own small enough to stay inline in the root page, which every Save
// rewrites anyway: it costs no page. It names the generation the last Save
// wrote and the one it kept, so that a record lost with its key, or a whole
// bucket lost with its name, is seen as damage rather than read as an older
// or a new agent:
//
//	mark bucket
//	  'g'    8-byte newest generation, 8-byte kept generation (0: none),
//	         1 byte of flags (1: the tasks bucket exists), framed
//	snapshot bucket
//	  'm'    empty payload, framed: this file keeps a mark, so a missing
//	         mark bucket is damage (files written before the mark have none)
var bucketMark = []byte("mark")

var (
	keyMark   = []byte{'g'}
	keyMarked = []byte{'m'}
)

// genMark is the content of the generation mark.
type genMark struct {
	Gen, Base uint64
	Tasks     bool
}

// writeMark records, in Save's transaction, that generation gen is the
// newest and base (nil: none) the one kept.
func writeMark(tx wtx, b *wbucket, gen uint64, base *record) error {
	mb, err := tx.createBucketIfNotExists(bucketMark)
	if err != nil {
		return err
	}
	p := binary.BigEndian.AppendUint64(make([]byte, 0, 17), gen)
	var baseGen uint64
	if base != nil {
		baseGen = base.Gen
	}
	p = binary.BigEndian.AppendUint64(p, baseGen)
	var flags byte
	if tx.Bucket(bucketTasks) != nil {
		flags |= 1
	}
	p = append(p, flags)
	if err := mb.Put(keyMark, appendFrame(nil, keyMark, p)); err != nil {
		return err
	}
	if b.Get(keyMarked) == nil {
		return b.Put(keyMarked, appendFrame(nil, keyMarked, nil))
	}
	return nil
}

// readMark returns the mark of the bucket mb, nil when there is none, and
// an error when it fails its checks.
func readMark(mb *bolt.Bucket) (*genMark, error) {
	if mb == nil {
		return nil, nil
	}
	v := mb.Get(keyMark)
	if v == nil {
		return nil, errors.New("the mark bucket is empty")
	}
	p, err := openFrame(keyMark, v)
	if err != nil {
		return nil, err
	}
	if len(p) != 17 || p[16]&^1 != 0 {
		return nil, fmt.Errorf("%w: a mark of %d bytes", errBadFrame, len(p))
	}
	m := &genMark{Gen: binary.BigEndian.Uint64(p), Base: binary.BigEndian.Uint64(p[8:]), Tasks: p[16]&1 != 0}
	if m.Base >= m.Gen {
		return nil, fmt.Errorf("%w: a mark whose kept generation %d is not below %d", errBadFrame, m.Base, m.Gen)
	}
	return m, nil
}
