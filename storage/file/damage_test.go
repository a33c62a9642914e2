package file

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestDamagedResultsIndex: a damaged task index used to answer "not found"
// for tasks that ran. Its copy now gives back every result one of the two
// holds intact, and what neither holds is counted in an error.
func TestDamagedResultsIndex(t *testing.T) {
	const n = 10
	cases := []struct {
		name   string
		damage func(dir string)
		lost   int
	}{
		{"cut", func(dir string) { cut(t, filepath.Join(dir, "r.results.jsonl"), 0.5) }, 0},
		{"flipped line", func(dir string) { flipLine(t, filepath.Join(dir, "r.results.jsonl"), 3) }, 0},
		{"missing", func(dir string) { os.Remove(filepath.Join(dir, "r.results.jsonl")) }, 0},
		{"copy cut", func(dir string) { cut(t, filepath.Join(dir, "r.results.jsonl.copy"), 0.3) }, 0},
		{"both, other lines", func(dir string) {
			flipLine(t, filepath.Join(dir, "r.results.jsonl"), 2)
			flipLine(t, filepath.Join(dir, "r.results.jsonl.copy"), 7)
		}, 0},
		{"both, same line", func(dir string) {
			flipLine(t, filepath.Join(dir, "r.results.jsonl"), 4)
			flipLine(t, filepath.Join(dir, "r.results.jsonl.copy"), 4)
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, Options{})
			snap := storagetest.Sample("r", 1)
			for i := 0; i < n; i++ {
				snap = snap.Clone()
				snap.TickIndex++
				snap.Outbox = []agent.Result{{Seq: snap.NextResultSeq, TaskID: fmt.Sprintf("t%d", i), AgentID: "r", Status: "done"}}
				snap.NextResultSeq++
				if err := s.Save(ctx, snap); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			tc.damage(dir)

			var logs storagetest.LogBuffer
			s = openStore(t, dir, Options{Logger: zerolog.New(&logs)})
			if got, err := s.Load(ctx, "r"); err != nil || got == nil || got.TickIndex != snap.TickIndex {
				t.Fatalf("Load = %v, %v", got, err)
			}
			found := 0
			for i := 0; i < n; i++ {
				r, err := s.TaskResult(ctx, "r", fmt.Sprintf("t%d", i))
				switch {
				case err == nil && r.Status == "done":
					found++
				case errors.Is(err, plugin.ErrNotFound), errors.Is(err, plugin.ErrCorrupt):
				default:
					t.Fatalf("TaskResult t%d: %v, %v", i, r, err)
				}
			}
			if found != n-tc.lost {
				t.Fatalf("%d of %d results answered, want %d:\n%s", found, n, n-tc.lost, logs.String())
			}
			if tc.lost > 0 && len(logs.Lines("error", fmt.Sprintf("%d lost", tc.lost))) != 1 {
				t.Fatalf("no error counting %d lost:\n%s", tc.lost, logs.String())
			}
			a, _ := os.ReadFile(filepath.Join(dir, "r.results.jsonl"))
			b, _ := os.ReadFile(filepath.Join(dir, "r.results.jsonl.copy"))
			if !bytes.Equal(a, b) {
				t.Fatal("the index and its copy differ after the repair")
			}
		})
	}
}

func cut(t *testing.T, path string, frac float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:int(float64(len(b))*frac)], 0o600); err != nil {
		t.Fatal(err)
	}
}

// flipLine changes one character of the status of line i.
func flipLine(t *testing.T, path string, i int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[i] = strings.Replace(lines[i], "done", "dona", 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}
