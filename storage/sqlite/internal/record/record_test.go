package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

func sampleRecord(t testing.TB) []byte {
	t.Helper()
	snap := storagetest.Sample("fuzz-agent", 7)
	meta, err := MetaOf(snap)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := Encode(&Record{
		Gen:     3,
		History: Span{Seq: 10, Key: 40, N: int64(len(snap.Memory.ShortTermHistory)), Last: 0xdeadbeef},
		Queue:   Span{Seq: 2, Key: 7, N: int64(len(snap.EventQueueBackup)), Last: 1},
		Meta:    meta,
	})
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

func TestRecordRoundTrip(t *testing.T) {
	blob := sampleRecord(t)
	r, snap, err := Decode(blob)
	if err != nil {
		t.Fatal(err)
	}
	if r.Gen != 3 || r.History.Key != 40 || r.Queue.Seq != 2 || snap.AgentID != "fuzz-agent" {
		t.Fatalf("decoded %+v %+v", r, snap)
	}
	for i := range blob {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x10
		if _, _, err := Decode(bad); err == nil {
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		}
	}
	if _, _, err := Decode(blob[:len(blob)-1]); !errors.Is(err, ErrChecksum) {
		t.Fatalf("truncated record: %v", err)
	}
}

// FuzzDecodeRecord feeds decodeRecord arbitrary blobs: it must never panic,
// and what it accepts must be a consistent record that encodes back to
// itself.
func FuzzDecodeRecord(f *testing.F) {
	blob := sampleRecord(f)
	f.Add(blob)
	f.Add(blob[:8])
	f.Add([]byte{})
	f.Add([]byte("OSQ1\x00\x00\x00\x00{}"))
	empty := agent.New("e", 1)
	meta, _ := MetaOf(empty)
	b, _ := Encode(&Record{Gen: 1, Meta: meta})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, snap, err := Decode(data)
		if err != nil {
			return
		}
		if err := snap.Validate(); err != nil {
			t.Fatalf("accepted an invalid snapshot: %v", err)
		}
		if r.History.N < 0 || r.Queue.N < 0 || r.History.Key < 0 || r.Queue.Key < 0 {
			t.Fatalf("accepted a negative range: %+v", r)
		}
		again, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, _, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		j1, _ := json.Marshal(r)
		j2, _ := json.Marshal(r2)
		if !bytes.Equal(j1, j2) {
			t.Fatalf("record changed on a round trip:\n%s\n%s", j1, j2)
		}
	})
}

// FuzzDecodeElement feeds decodeElement arbitrary row data.
func FuzzDecodeElement(f *testing.F) {
	for _, v := range []any{
		&agent.Message{Role: "user", Content: "hello", TaskID: "t1"},
		&agent.Event{Source: "mqtt", Type: "task", Payload: json.RawMessage(`{"a":[1,2]}`), ID: "e1"},
		&agent.Result{Seq: 1, TaskID: "t", Status: agent.ResultDone},
	} {
		b, _, err := EncodeElement(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m agent.Message
		if sum, err := DecodeElement(data, &m); err == nil {
			b, sum2, err := EncodeElement(&m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeElement(b, &agent.Message{}); err != nil || (bytes.Equal(b, data) && sum != sum2) {
				t.Fatalf("re-encoded element: %v", err)
			}
		}
		var e agent.Event
		DecodeElement(data, &e) //nolint:errcheck // only must not panic
	})
}
