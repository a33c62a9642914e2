// Package record is the byte format of the SQLite store's rows: generation
// records and element data, each behind a CRC-32C. It has no SQL in it, so
// that its decoders can be fuzzed on their own.
package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
)

// magic starts every generation record; the number is the format
// version of the record, not the schema version of the database.
var magic = [4]byte{'O', 'S', 'Q', '1'}

// ErrChecksum is what the decoders return, wrapped, when the bytes are not
// what was written. Load turns it into a fall back or plugin.ErrCorrupt. It
// is backend.ErrChecksum.
var ErrChecksum = backend.ErrChecksum

// Span is where one list of a generation lives in the elements table.
type Span struct {
	Seq  uint64 `json:"seq"`  // absolute position of element 0 (Snapshot.HistorySeq or QueueSeq)
	Key  int64  `json:"key"`  // elements.seq of element 0
	N    int64  `json:"n"`    // number of elements; their keys are Key .. Key+N-1
	Last uint32 `json:"last"` // CRC-32C of the last element's data, 0 when N is 0
}

// End is the first key after the span.
func (s Span) End() int64 { return s.Key + s.N }

// Record is one generation of one agent: the snapshot without its lists,
// and where the lists are. Outbox and Recent (the recent event ids) are nil
// in records of the first format, whose Meta holds them inline.
type Record struct {
	Gen     uint64          `json:"gen"`
	History Span            `json:"history"`
	Queue   Span            `json:"queue"`
	Outbox  *Span           `json:"outbox,omitempty"`
	Recent  *Span           `json:"recent,omitempty"`
	Meta    json.RawMessage `json:"snapshot"` // contract JSON, lists emptied ([] or null)
}

// Encode returns the blob of r (backend.EncodeRecord):
//
//	magic "OSQ1" | CRC-32C of payload, 4 bytes big endian | payload (JSON of r)
func Encode(r *Record) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return backend.EncodeRecord(magic, payload), nil
}

// Decode parses and checks a blob written by Encode. It returns
// an error for anything else, including well-formed JSON that does not
// describe a consistent record; it never panics.
func Decode(b []byte) (*Record, *agent.Snapshot, error) {
	payload, err := backend.OpenRecord(magic, b, 0)
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	if dec.More() {
		return nil, nil, errors.New("record: trailing data")
	}
	for _, sp := range []*Span{&r.History, &r.Queue, r.Outbox, r.Recent} {
		if sp != nil && (sp.Key < 0 || sp.N < 0 || sp.End() < sp.Key) {
			return nil, nil, fmt.Errorf("record: bad element range %d+%d", sp.Key, sp.N)
		}
	}
	if (r.Outbox == nil) != (r.Recent == nil) {
		return nil, nil, errors.New("record: one of outbox and recent ids stored apart")
	}
	s, err := agent.Decode(r.Meta)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	// The lists live in the elements table: the record holds [] for a list
	// that was present, null for one that was nil, and nothing else.
	if len(s.Memory.ShortTermHistory) != 0 || len(s.EventQueueBackup) != 0 {
		return nil, nil, errors.New("record: lists stored inline")
	}
	if s.Memory.ShortTermHistory == nil && r.History.N != 0 || s.EventQueueBackup == nil && r.Queue.N != 0 {
		return nil, nil, errors.New("record: a null list with elements")
	}
	if r.Outbox != nil && (len(s.Outbox) != 0 || len(s.RecentEventIDs) != 0) {
		return nil, nil, errors.New("record: outbox or recent ids stored inline and apart")
	}
	return &r, s, nil
}

// MetaOf returns the contract JSON of s with its lists emptied: [] for a
// history or queue that is present, null for a nil one, so that Load gives
// back the very same JSON; the outbox and the recent ids (omitted when
// empty) are left out.
func MetaOf(s *agent.Snapshot) ([]byte, error) {
	c := *s
	c.Outbox, c.RecentEventIDs = nil, nil
	if c.Memory.ShortTermHistory != nil {
		c.Memory.ShortTermHistory = []agent.Message{}
	}
	if c.EventQueueBackup != nil {
		c.EventQueueBackup = []agent.Event{}
	}
	return agent.Encode(&c)
}

// EncodeElement returns the row data of one message, event or indexed
// result (backend.EncodeJSON): CRC-32C of the JSON, 4 bytes big endian, then
// the JSON. It also returns the checksum, which the cache keeps for the last
// element.
func EncodeElement(v any) ([]byte, uint32, error) { return backend.EncodeJSON(v) }

// DecodeElement checks the checksum of row data and decodes its JSON into v.
func DecodeElement(b []byte, v any) (uint32, error) { return backend.DecodeJSON("element", b, v) }
