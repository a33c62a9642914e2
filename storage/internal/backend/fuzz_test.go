package backend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeJSON feeds the checksummed JSON frame decoder arbitrary bytes:
// it never panics, and a frame it accepts carries the checksum it reports
// and encodes back to a frame that decodes to the same value.
func FuzzDecodeJSON(f *testing.F) {
	good, _, _ := EncodeJSON(map[string]any{"task_id": "t1", "status": "done", "tick_index": 3})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{})
	empty, _, _ := EncodeJSON(nil)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		sum, err := DecodeJSON("fuzz", b, &v)
		if err != nil {
			return
		}
		if sum != binary.BigEndian.Uint32(b) {
			t.Fatalf("checksum %08x reported, %08x stored", sum, binary.BigEndian.Uint32(b))
		}
		again, _, err := EncodeJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		var w any
		if _, err := DecodeJSON("fuzz", again, &w); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		j1, _ := json.Marshal(v)
		j2, _ := json.Marshal(w)
		if string(j1) != string(j2) {
			t.Fatalf("round trip changed the value: %s, %s", j1, j2)
		}
	})
}

// FuzzOpenFrame feeds the keyed frame decoder arbitrary bytes: it never
// panics, what it accepts frames back to the same bytes, and an accepted
// frame is refused under another key.
func FuzzOpenFrame(f *testing.F) {
	f.Add([]byte("h1"), AppendFrame(nil, []byte("h1"), []byte(`{"role":"user"}`)))
	f.Add([]byte("k"), AppendFrame(nil, []byte("k"), nil))
	f.Add([]byte("k"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		p, err := OpenFrame(key, value)
		if err != nil {
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("error %v does not wrap ErrChecksum", err)
			}
			return
		}
		if again := AppendFrame(nil, key, p); !bytes.Equal(again, value) {
			t.Fatalf("frame %x reframed as %x", value, again)
		}
		if _, err := OpenFrame(append(key, 'x'), value); err == nil {
			t.Fatal("a frame opened under another key")
		}
	})
}
