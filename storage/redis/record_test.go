package redis

import (
	"bytes"
	"errors"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

func TestRecordDetectsEveryFlip(t *testing.T) {
	payload, _ := agent.Encode(storagetest.Sample("r", 1))
	rec := encodeRecord(9, payload)
	gen, snap, err := decodeRecord(rec)
	if err != nil || gen != 9 || snap.AgentID != "r" {
		t.Fatalf("decode: %v %d %v", snap, gen, err)
	}
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x04
		if _, _, err := decodeRecord(bad); err == nil {
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		}
	}
	if _, _, err := decodeRecord(rec[:len(rec)-1]); !errors.Is(err, errChecksum) {
		t.Fatalf("truncated: %v", err)
	}
}

// FuzzDecodeRecord: decodeRecord must never panic, and what it accepts must
// encode back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	payload, _ := agent.Encode(storagetest.Sample("fuzz", 2))
	rec := encodeRecord(3, payload)
	f.Add(rec)
	f.Add(rec[:16])
	blank, _ := agent.Encode(agent.New("b", 1))
	f.Add(encodeRecord(1, blank))
	f.Add([]byte("OSR1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gen, snap, err := decodeRecord(data)
		if err != nil {
			return
		}
		if err := snap.Validate(); err != nil {
			t.Fatalf("accepted an invalid snapshot: %v", err)
		}
		p, _ := agent.Encode(snap)
		gen2, snap2, err := decodeRecord(encodeRecord(gen, p))
		if err != nil || gen2 != gen {
			t.Fatalf("re-encoded record: %v", err)
		}
		p2, _ := agent.Encode(snap2)
		if !bytes.Equal(p, p2) {
			t.Fatalf("round trip changed the snapshot:\n%s\n%s", p, p2)
		}
	})
}

// FuzzDecodeResult: decodeResult must never panic.
func FuzzDecodeResult(f *testing.F) {
	b, _ := encodeResult(&agent.Result{Seq: 4, TaskID: "t", Status: agent.ResultDone})
	f.Add(b)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeResult(data)
		if err != nil {
			return
		}
		again, err := encodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeResult(again); err != nil {
			t.Fatalf("re-encoded result: %v", err)
		}
	})
}
