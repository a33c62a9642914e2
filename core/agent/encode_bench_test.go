package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkEncode is the body every Save encodes (bbolt's record, the file
// and Redis stores' payload): a snapshot with a full running summary, as an
// agent has once its history passes its budget. "marshal" is
// json.Marshal(s), what Encode did before.
func BenchmarkEncode(b *testing.B) {
	s := &Snapshot{AgentID: "master", TickIndex: 12345, Timestamp: 1700000000000, Status: StatusStopped,
		Memory: Memory{WorkingVariables: map[string]any{"history_summary": strings.Repeat("user: payload\nassistant: payload\n", 60)}}}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
