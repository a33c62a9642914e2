package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// castagnoli is the CRC-32C table of every checksum in this package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksumPrefix names the algorithm in the "checksum" field.
const checksumPrefix = "crc32c:"

// errChecksum is wrapped by decode errors that mean the bytes are not what
// was written: a checksum mismatch.
var errChecksum = errors.New("checksum mismatch")

// wire is the JSON of a snapshot file. Checksum is a pointer so that an
// absent field and "" both read as a hand edit.
type wire struct {
	Checksum   *string         `json:"checksum"`
	Generation uint64          `json:"generation"`
	IndexedSeq uint64          `json:"indexed_seq"`
	Snapshot   json.RawMessage `json:"snapshot"`
}

// generation is one decoded snapshot file.
type generation struct {
	gen        uint64
	indexedSeq uint64
	snap       *agent.Snapshot
	edited     bool // accepted without a checksum
}

// checksum returns the "checksum" field for a generation whose snapshot, in
// compact form, is compact.
func checksum(gen, indexedSeq uint64, compact []byte) string {
	h := crc32.New(castagnoli)
	fmt.Fprintf(h, "%d\n%d\n", gen, indexedSeq)
	h.Write(compact)
	return fmt.Sprintf("%s%08x", checksumPrefix, h.Sum32())
}

// encode returns the file of a generation whose snapshot's contract JSON
// (as agent.Encode returns it, compact) is payload.
func encode(gen, indexedSeq uint64, payload []byte) ([]byte, error) {
	sum := checksum(gen, indexedSeq, payload)
	out, err := json.MarshalIndent(wire{Checksum: &sum, Generation: gen, IndexedSeq: indexedSeq, Snapshot: payload}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// decode parses a snapshot file. Errors name a line and column where there
// is one; the caller adds the file name. It never panics.
func decode(data []byte) (*generation, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return nil, positioned(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the closing brace", position(data, dec.InputOffset()))
	}
	if len(w.Snapshot) == 0 || string(w.Snapshot) == "null" {
		return nil, errors.New(`no "snapshot" object`)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, w.Snapshot); err != nil {
		return nil, err // cannot happen: the decoder checked it
	}
	g := &generation{gen: w.Generation, indexedSeq: w.IndexedSeq}
	switch {
	case w.Checksum == nil || *w.Checksum == "":
		g.edited = true
	case !strings.HasPrefix(*w.Checksum, checksumPrefix) || len(*w.Checksum) != len(checksumPrefix)+8 || !isHex((*w.Checksum)[len(checksumPrefix):]):
		return nil, fmt.Errorf(`checksum %q is not of the form "crc32c:" and 8 hex digits; `+
			`if you edited the file by hand, set "checksum" to "" to accept the edit`, *w.Checksum)
	default:
		if want := checksum(w.Generation, w.IndexedSeq, compact.Bytes()); *w.Checksum != want {
			return nil, fmt.Errorf(`the file says %s but its content is %s: %w; `+
				`if you edited the file by hand, set "checksum" to "" to accept the edit`, *w.Checksum, want, errChecksum)
		}
	}
	snap, err := agent.Decode(compact.Bytes())
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	g.snap = snap
	return g, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// positioned adds the line and column of a JSON error that has an offset.
func positioned(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s: invalid JSON: %v", position(data, se.Offset-1), err) // Offset is just past the bad byte
	case errors.As(err, &te):
		return fmt.Errorf("%s: %v", position(data, te.Offset), err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: invalid JSON: the file ends too soon (truncated?)", position(data, int64(len(data))))
	}
	return err
}

// position renders a byte offset as "line L, column C (byte B)".
func position(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return "line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + " (byte " + strconv.FormatInt(off, 10) + ")"
}
