package redis

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// castagnoli is the CRC-32C table of every checksum in this package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// magic starts every snapshot record; the digit is the record format.
var magic = [4]byte{'O', 'S', 'R', '1'}

// errChecksum is wrapped by the decoders when the bytes are not what was
// written.
var errChecksum = errors.New("checksum mismatch")

// encodeRecord returns the record of generation gen of the snapshot whose
// contract JSON is payload.
func encodeRecord(gen uint64, payload []byte) []byte {
	out := make([]byte, 16, 16+len(payload))
	copy(out, magic[:])
	binary.BigEndian.PutUint64(out[8:], gen)
	out = append(out, payload...)
	binary.BigEndian.PutUint32(out[4:], crc32.Checksum(out[8:], castagnoli))
	return out
}

// decodeRecord checks a record and decodes its snapshot. It never panics.
func decodeRecord(b []byte) (uint64, *agent.Snapshot, error) {
	if len(b) < 16 {
		return 0, nil, fmt.Errorf("record of %d bytes is too short: %w", len(b), errChecksum)
	}
	if !bytes.Equal(b[:4], magic[:]) {
		return 0, nil, fmt.Errorf("record starts with %q, not %q: %w", b[:4], magic[:], errChecksum)
	}
	if got, want := crc32.Checksum(b[8:], castagnoli), binary.BigEndian.Uint32(b[4:]); got != want {
		return 0, nil, fmt.Errorf("record crc32c %08x, stored %08x: %w", got, want, errChecksum)
	}
	gen := binary.BigEndian.Uint64(b[8:])
	s, err := agent.Decode(b[16:])
	if err != nil {
		return 0, nil, err
	}
	return gen, s, nil
}

// encodeResult returns the stored form of an indexed result.
func encodeResult(r *agent.Result) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, 4+len(js))
	binary.BigEndian.PutUint32(out, crc32.Checksum(js, castagnoli))
	return append(out, js...), nil
}

// decodeResult checks and decodes an indexed result. It never panics.
func decodeResult(b []byte) (*agent.Result, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("result of %d bytes is too short: %w", len(b), errChecksum)
	}
	if got, want := crc32.Checksum(b[4:], castagnoli), binary.BigEndian.Uint32(b); got != want {
		return nil, fmt.Errorf("result crc32c %08x, stored %08x: %w", got, want, errChecksum)
	}
	var r agent.Result
	if err := json.Unmarshal(b[4:], &r); err != nil {
		return nil, err
	}
	return &r, nil
}
