package bbolt

import (
	"bytes"
	"errors"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// seedRecords returns encoded records: a full sample, one with nil lists and
// nonzero ranges, and a blank agent.
func seedRecords(tb testing.TB) [][2][]byte {
	tb.Helper()
	full := storagetest.Sample("seed", 7)
	bare := storagetest.Sample("seed-nil", 1)
	bare.Memory.ShortTermHistory, bare.EventQueueBackup, bare.Memory.WorkingVariables = nil, nil, nil
	blank := agent.New("seed-blank", 0)
	recs := []struct {
		snap *agent.Snapshot
		rec  record
	}{
		{full, record{Gen: 3, TaskNext: 9,
			History: listRange{Seq: 7, Start: 100, Count: 5, LastSum: 0xdeadbeef},
			Queue:   listRange{Seq: 7, Start: 4, Count: 3, LastSum: 1}}},
		{bare, record{Gen: 1 << 40, History: listRange{Nil: true, Seq: 12}, Queue: listRange{Nil: true}}},
		{blank, record{Gen: 1}},
	}
	var out [][2][]byte
	for _, r := range recs {
		body, err := recordBody(r.snap)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, [2][]byte{key(prefixRecord, r.rec.Gen), encodeRecord(nil, &r.rec, body)})
	}
	return out
}

func TestRecordRoundTrip(t *testing.T) {
	for _, kv := range seedRecords(t) {
		r, err := decodeRecord(kv[0], kv[1])
		if err != nil {
			t.Fatal(err)
		}
		body, err := recordBody(r.Snap)
		if err != nil {
			t.Fatal(err)
		}
		if again := encodeRecord(nil, r, body); !bytes.Equal(again, kv[1]) {
			t.Fatalf("record changed in a round trip:\n%q\n%q", kv[1], again)
		}
	}
}

func TestRecordDamage(t *testing.T) {
	kv := seedRecords(t)[0]
	k, v := kv[0], kv[1]
	flip := func(i int) []byte {
		d := append([]byte(nil), v...)
		d[i] ^= 0x10
		return d
	}
	cases := []struct {
		name  string
		key   []byte
		value []byte
	}{
		{"empty", k, nil},
		{"header only", k, v[:frameHeader]},
		{"truncated", k, v[:len(v)-1]},
		{"extended", k, append(append([]byte(nil), v...), 0)},
		{"checksum flipped", k, flip(0)},
		{"length flipped", k, flip(5)},
		{"version flipped", k, flip(frameHeader)},
		{"range flipped", k, flip(frameHeader + 20)},
		{"JSON flipped", k, flip(len(v) - 3)},
		{"other generation's key", key(prefixRecord, 4), v},
		{"not a record key", key(prefixHistory, 3), v},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := decodeRecord(tc.key, tc.value); !errors.Is(err, errBadFrame) || r != nil {
				t.Fatalf("decodeRecord = %v, %v; want nil and errBadFrame", r, err)
			}
		})
	}
}

// FuzzDecodeRecord checks that decodeRecord never panics and that what it
// accepts survives a round trip. Each input is tried as a stored value, and
// wrapped in a valid frame so that the fuzzer reaches the record decoder
// behind the checksum.
func FuzzDecodeRecord(f *testing.F) {
	for _, kv := range seedRecords(f) {
		f.Add(kv[0], kv[1])
		f.Add(kv[0], kv[1][frameHeader:]) // the payload, framed by the target
		f.Add(kv[0], kv[1][:len(kv[1])/2])
	}
	f.Add([]byte{}, []byte{})
	f.Add(key(prefixRecord, 0), []byte("\x01"))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		for _, value := range [][]byte{v, appendFrame(nil, k, v)} {
			r, err := decodeRecord(k, value)
			if err != nil {
				if !errors.Is(err, errBadFrame) {
					t.Fatalf("error %v does not wrap errBadFrame", err)
				}
				continue
			}
			body, err := recordBody(r.Snap)
			if err != nil {
				t.Fatalf("decoded a record whose snapshot does not encode: %v", err)
			}
			again, err := decodeRecord(k, encodeRecord(nil, r, body))
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
			if again.Gen != r.Gen || again.History != r.History || again.Queue != r.Queue || again.TaskNext != r.TaskNext {
				t.Fatalf("round trip changed the record: %+v, then %+v", r, again)
			}
		}
	})
}
