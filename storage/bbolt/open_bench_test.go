package bbolt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// BenchmarkOpen measures what opening an agent's file costs, by the size of
// the file: the check before mapping (checkFile), bbolt's tx.Check, and the
// whole open of the store (both, bbolt's own open and Load), and a scrub of
// the open store (Scrub). Every Save
// appends one 1 KiB history message and one result, and the history is
// bounded to 1,000 messages.
func BenchmarkOpen(b *testing.B) {
	for _, saves := range []int{100, 1000, 10000} {
		dir := b.TempDir()
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		snap := storagetest.Sample("open", 1)
		msg := make([]byte, 1024)
		for i := range msg {
			msg[i] = 'a' + byte(i%26)
		}
		for i := 0; i < saves; i++ {
			snap = snap.Clone()
			snap.TickIndex++
			snap.Memory.ShortTermHistory = append(snap.Memory.ShortTermHistory, agent.Message{Role: "user", Content: string(msg)})
			if n := len(snap.Memory.ShortTermHistory); n > 1000 {
				snap.Memory.ShortTermHistory = snap.Memory.ShortTermHistory[n-1000:]
				snap.HistorySeq += uint64(n - 1000)
			}
			snap.Outbox = []agent.Result{{Seq: snap.NextResultSeq, TaskID: fmt.Sprintf("t%d", i), AgentID: "open", Status: "done"}}
			snap.NextResultSeq++
			if err := s.Save(ctx, snap); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
		path := filepath.Join(dir, "open", FileName)
		fi, _ := os.Stat(path)
		name := fmt.Sprintf("saves%d", saves)
		b.Run(name+"/checkFile", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := checkFile(path); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
		})
		b.Run(name+"/txCheck", func(b *testing.B) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := boltCheck(db); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/scrub", func(b *testing.B) {
			// What a scrub holds the agent's lock for: checkFile with
			// every value's frame checked, the file's cache dropped first.
			s, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Load(ctx, "open"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if rep, err := s.Scrub(ctx, "open"); err != nil || len(rep.Damage) > 0 {
					b.Fatal(rep, err)
				}
			}
		})
		b.Run(name+"/openAndLoad", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s, err := Open(dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Load(ctx, "open"); err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}
