package backend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// castagnoli is the CRC-32C table of every checksum in this package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum is wrapped by the decoders when the bytes are not what was
// written. The backends turn it into a fall back to an older generation or
// into plugin.ErrCorrupt.
var ErrChecksum = errors.New("checksum mismatch")

// RecordHeader is the size of a record's header: its magic and its
// checksum.
const RecordHeader = 8

// EncodeRecord returns a record: the 4 bytes of magic, which name the
// format, then the CRC-32C of the body (4 bytes, big-endian), then the body,
// which is parts one after the other.
func EncodeRecord(magic [4]byte, parts ...[]byte) []byte {
	n := RecordHeader
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, RecordHeader, n)
	copy(out, magic[:])
	for _, p := range parts {
		out = append(out, p...)
	}
	binary.BigEndian.PutUint32(out[4:], Sum(out[RecordHeader:]))
	return out
}

// OpenRecord checks a record written by EncodeRecord with magic, whose body
// has at least minBody bytes, and returns its body, which aliases b. Its
// errors wrap ErrChecksum. It never panics.
func OpenRecord(magic [4]byte, b []byte, minBody int) ([]byte, error) {
	if len(b) < RecordHeader+minBody {
		return nil, fmt.Errorf("record of %d bytes is too short: %w", len(b), ErrChecksum)
	}
	if !bytes.Equal(b[:4], magic[:]) {
		return nil, fmt.Errorf("record starts with %q, not %q: %w", b[:4], magic[:], ErrChecksum)
	}
	body := b[RecordHeader:]
	if got, want := Sum(body), binary.BigEndian.Uint32(b[4:]); got != want {
		return nil, fmt.Errorf("record crc32c %08x, stored %08x: %w", got, want, ErrChecksum)
	}
	return body, nil
}

// EncodeJSON returns the stored form of a value: the CRC-32C of its JSON
// (4 bytes, big-endian), then the JSON. It returns the checksum too.
func EncodeJSON(v any) ([]byte, uint32, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, 0, err
	}
	sum := Sum(js)
	out := make([]byte, 4, 4+len(js))
	binary.BigEndian.PutUint32(out, sum)
	return append(out, js...), sum, nil
}

// DecodeJSON checks data written by EncodeJSON and decodes its JSON into v,
// and returns the checksum. what names the value in errors ("element",
// "result"); errors of the checks wrap ErrChecksum. It never panics.
func DecodeJSON(what string, b []byte, v any) (uint32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("%s of %d bytes is too short: %w", what, len(b), ErrChecksum)
	}
	want := binary.BigEndian.Uint32(b)
	if got := Sum(b[4:]); got != want {
		return 0, fmt.Errorf("%s crc32c %08x, stored %08x: %w", what, got, want, ErrChecksum)
	}
	if err := json.Unmarshal(b[4:], v); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return want, nil
}

// Sum returns the CRC-32C of b, the checksum of every format here.
func Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// FrameHeader is the size of a frame's header: its checksum and length.
const FrameHeader = 8

// AppendFrame appends to dst the frame of payload stored under key:
//
//	[0:4]  CRC-32C, big-endian, of the key followed by bytes [4:]
//	[4:8]  length of the payload, big-endian
//	[8:]   payload
//
// Covering the key means a value found under the wrong key fails too. It
// is the format of every value of the bbolt store.
func AppendFrame(dst, key, payload []byte) []byte {
	off := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, dst[off+4:])
	binary.BigEndian.PutUint32(dst[off:], sum)
	return dst
}

// SealFrame completes in place the frame f of the payload f[FrameHeader:]
// stored under key, whose header f[:FrameHeader] it writes: the frame
// AppendFrame would append, built without copying the payload.
func SealFrame(f, key []byte) []byte {
	binary.BigEndian.PutUint32(f[4:], uint32(len(f)-FrameHeader))
	binary.BigEndian.PutUint32(f, crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, f[4:]))
	return f
}

// OpenFrame checks the frame stored under key and returns its payload,
// which aliases value. Its errors wrap ErrChecksum. It never panics.
func OpenFrame(key, value []byte) ([]byte, error) {
	if len(value) < FrameHeader {
		return nil, fmt.Errorf("%d bytes, shorter than its header: %w", len(value), ErrChecksum)
	}
	n := binary.BigEndian.Uint32(value[4:8])
	if uint64(n) != uint64(len(value)-FrameHeader) {
		return nil, fmt.Errorf("length says %d bytes of payload, there are %d: %w", n, len(value)-FrameHeader, ErrChecksum)
	}
	want := binary.BigEndian.Uint32(value[0:4])
	if got := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, value[4:]); got != want {
		return nil, fmt.Errorf("checksum %08x, want %08x: %w", got, want, ErrChecksum)
	}
	return value[FrameHeader:], nil
}
