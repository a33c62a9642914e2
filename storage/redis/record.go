package redis

import (
	"encoding/binary"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
)

// magic starts every snapshot record; the digit is the record format.
var magic = [4]byte{'O', 'S', 'R', '1'}

// errChecksum is wrapped by the decoders when the bytes are not what was
// written. It is backend.ErrChecksum.
var errChecksum = backend.ErrChecksum

// encodeRecord returns the record of generation gen of the snapshot whose
// contract JSON is payload (backend.EncodeRecord):
//
//	magic "OSR1" | CRC-32C of the rest, 4 bytes big endian | gen, 8 bytes big endian | payload
func encodeRecord(gen uint64, payload []byte) []byte {
	return backend.EncodeRecord(magic, binary.BigEndian.AppendUint64(make([]byte, 0, 8), gen), payload)
}

// decodeRecord checks a record and decodes its snapshot. It never panics.
func decodeRecord(b []byte) (uint64, *agent.Snapshot, error) {
	body, err := backend.OpenRecord(magic, b, 8)
	if err != nil {
		return 0, nil, err
	}
	gen := binary.BigEndian.Uint64(body)
	s, err := agent.Decode(body[8:])
	if err != nil {
		return 0, nil, err
	}
	return gen, s, nil
}

// encodeResult returns the stored form of an indexed result
// (backend.EncodeJSON): CRC-32C of the JSON, 4 bytes big endian, then the
// JSON.
func encodeResult(r *agent.Result) ([]byte, error) {
	b, _, err := backend.EncodeJSON(r)
	return b, err
}

// decodeResult checks and decodes an indexed result. It never panics.
func decodeResult(b []byte) (*agent.Result, error) {
	var r agent.Result
	if _, err := backend.DecodeJSON("result", b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
