package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

var ctx = context.Background()

func testLogger(t *testing.T) zerolog.Logger { return zerolog.New(zerolog.NewTestWriter(t)) }

func openStore(t *testing.T, dir string, o Options) *Store {
	t.Helper()
	if o.Logger.GetLevel() == zerolog.DebugLevel { // the zero Logger; zerolog.New gives TraceLevel
		o.Logger = testLogger(t)
	}
	s, err := Open(ctx, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// flip damages the middle of the file at path.
func flip(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x20
	data[len(data)/2+1] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func harness() storagetest.Harness {
	return storagetest.Harness{
		Open: func(t *testing.T, dir string) plugin.Storage {
			s, err := Open(ctx, dir, Options{Logger: testLogger(t)})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		},
		CorruptLatest: func(t *testing.T, dir, agentID string) {
			flip(t, filepath.Join(dir, fileName(agentID)+extCurrent))
		},
		CorruptAll: func(t *testing.T, dir, agentID string) {
			flip(t, filepath.Join(dir, fileName(agentID)+extCurrent))
			flip(t, filepath.Join(dir, fileName(agentID)+extPrev))
		},
		Files: func(dir, agentID string) []string {
			var out []string
			for _, ext := range []string{extCurrent, extPrev, extResults, extCopy} {
				out = append(out, filepath.Join(dir, fileName(agentID)+ext))
			}
			return out
		},
	}
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, harness())
}

// TestCrash kills a saving child with SIGKILL at random points: every time,
// the store must load the last acknowledged tick or the one in flight,
// exactly as it was saved. See storagetest.RunCrash.
func TestCrash(t *testing.T) {
	storagetest.RunCrash(t, storagetest.CrashHarness{Open: harness().Open})
}

// BenchmarkSave is storagetest.BenchmarkSave: the latency of a durable Save
// (median and 99th percentile) and the bytes written per Save (the new
// generation's file and the lines of the task index).
func BenchmarkSave(b *testing.B) {
	storagetest.BenchmarkSave(b, func(b *testing.B, dir string) plugin.Storage {
		s, err := Open(ctx, dir, Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}

func mustSave(t *testing.T, s *Store, snap *agent.Snapshot) {
	t.Helper()
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
}

// twoGenerations saves ticks 1 and 2 of an agent and returns them.
func twoGenerations(t *testing.T, s *Store, id string) (prev, cur *agent.Snapshot) {
	t.Helper()
	prev, cur = storagetest.Sample(id, 1), storagetest.Sample(id, 2)
	mustSave(t, s, prev)
	mustSave(t, s, cur)
	return prev, cur
}

func TestLayout(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	twoGenerations(t, s, "worker:7")
	twoGenerations(t, s, "a.prev")
	twoGenerations(t, s, "a")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{
		"a.json", "a.json.prev", "a.prev.json", "a.prev.json.prev", "a.prev.results.jsonl", "a.prev.results.jsonl.copy",
		"a.results.jsonl", "a.results.jsonl.copy",
		"worker%3A7.json", "worker%3A7.json.prev", "worker%3A7.results.jsonl", "worker%3A7.results.jsonl.copy",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	ids, err := s.List(ctx)
	if err != nil || !slices.Equal(ids, []string{"a", "a.prev", "worker:7"}) {
		t.Fatalf("List = %q, %v", ids, err)
	}

	// The file is the contract JSON, indented, inside the wrapper.
	data, err := os.ReadFile(filepath.Join(dir, "worker%3A7.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("{\n  \"checksum\": \"crc32c:")) || !bytes.Contains(data, []byte("\n  \"snapshot\": {\n    \"agent_id\": \"worker:7\",")) {
		t.Fatalf("not the documented layout:\n%s", data)
	}
	var w struct {
		Generation uint64          `json:"generation"`
		Snapshot   json.RawMessage `json:"snapshot"`
	}
	if err := json.Unmarshal(data, &w); err != nil || w.Generation != 2 {
		t.Fatalf("generation %d, %v", w.Generation, err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, w.Snapshot)
	want2, _ := agent.Encode(storagetest.Sample("worker:7", 2))
	if !bytes.Equal(compact.Bytes(), want2) {
		t.Fatalf("the snapshot in the file is not the contract JSON:\n%s\n%s", compact.Bytes(), want2)
	}
}

func TestCrashBetweenRenames(t *testing.T) {
	dir := t.TempDir()
	var logs storagetest.LogBuffer
	s := openStore(t, dir, Options{Logger: zerolog.New(&logs)})
	_, prev := twoGenerations(t, s, "crash")
	// The state a crash after "current → previous" and before
	// "temporary → current" leaves: no current file, a temporary one.
	cur := filepath.Join(dir, "crash.json")
	if err := os.Rename(cur, filepath.Join(dir, "crash.json.prev")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".crash.json.tmp"), []byte(`{"half": "writ`), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, Options{Logger: zerolog.New(&logs)})
	got, err := s.Load(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, got, prev)
	if !strings.Contains(logs.String(), "missing") {
		t.Errorf("no warning about the missing current file:\n%s", logs.String())
	}
	next := storagetest.Sample("crash", 3)
	mustSave(t, s, next)
	s = openStore(t, dir, Options{})
	got, err = s.Load(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, got, next)
	if _, err := os.Stat(filepath.Join(dir, ".crash.json.tmp")); err == nil {
		t.Error("the temporary file of the interrupted save is still there")
	}
}

func TestTruncated(t *testing.T) {
	for _, size := range []int{0, 1, 100, -1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			var logs storagetest.LogBuffer
			s := openStore(t, dir, Options{Logger: zerolog.New(&logs)})
			prev, _ := twoGenerations(t, s, "cut")
			cut := func(path string) {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				n := size
				if n < 0 {
					n = len(data) - 2
				}
				if err := os.WriteFile(path, data[:n], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cut(filepath.Join(dir, "cut.json"))
			s = openStore(t, dir, Options{Logger: zerolog.New(&logs)})
			got, err := s.Load(ctx, "cut")
			if err != nil {
				t.Fatal(err)
			}
			storagetest.MustEqual(t, got, prev)
			if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "cut.json") {
				t.Errorf("no warning naming the file:\n%s", logs.String())
			}

			cut(filepath.Join(dir, "cut.json.prev"))
			got, err = s.Load(ctx, "cut")
			if !errors.Is(err, plugin.ErrCorrupt) || got != nil {
				t.Fatalf("both files truncated: %v, %v; want ErrCorrupt", got, err)
			}
			if !strings.Contains(err.Error(), "cut.json:") || !strings.Contains(err.Error(), "cut.json.prev:") {
				t.Errorf("the error does not name both files: %v", err)
			}
			if size > 0 && !strings.Contains(err.Error(), "line ") {
				t.Errorf("the error gives no position: %v", err)
			}
		})
	}
}

// TestEveryByteFlipped damages each byte of the current file in turn: Load
// returns the current snapshot (the byte did not matter) or the previous
// one, never anything else, never an error.
func TestEveryByteFlipped(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{Logger: zerolog.Nop()})
	prev, cur := twoGenerations(t, s, "flips")
	path := filepath.Join(dir, "flips.json")
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pj, _ := agent.Encode(prev)
	cj, _ := agent.Encode(cur)
	s = openStore(t, dir, Options{Logger: zerolog.Nop()})
	var fellBack int
	for i := range pristine {
		for _, mask := range []byte{[]byte{0x01, 0x20, 0x80}[i%3], 0x10} {
			data := bytes.Clone(pristine)
			data[i] ^= mask
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s.Load(ctx, "flips")
			if err != nil || got == nil {
				t.Fatalf("byte %d ^ %#x: %v, %v", i, mask, got, err)
			}
			gj, _ := agent.Encode(got)
			switch {
			case bytes.Equal(gj, pj):
				fellBack++
			case bytes.Equal(gj, cj):
			default:
				t.Fatalf("byte %d ^ %#x: loaded a snapshot that was never saved:\n%s", i, mask, gj)
			}
		}
	}
	t.Logf("%d bytes × 2 flips: %d loaded the previous generation", len(pristine), fellBack)
}

func TestHandEdit(t *testing.T) {
	edit := func(t *testing.T, path string, f func(w map[string]any)) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var w map[string]any
		if err := json.Unmarshal(data, &w); err != nil {
			t.Fatal(err)
		}
		f(w)
		out, _ := json.MarshalIndent(w, "", "    ") // a person's editor may indent differently
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setTick := func(w map[string]any) { w["snapshot"].(map[string]any)["tick_index"] = 99 }

	t.Run("checksum cleared: accepted", func(t *testing.T) {
		dir := t.TempDir()
		var logs storagetest.LogBuffer
		s := openStore(t, dir, Options{Logger: zerolog.New(&logs)})
		twoGenerations(t, s, "ed")
		edit(t, filepath.Join(dir, "ed.json"), func(w map[string]any) { setTick(w); w["checksum"] = "" })
		got, err := s.Load(ctx, "ed")
		if err != nil || got.TickIndex != 99 {
			t.Fatalf("Load = %v, %v; want the edited tick 99", got, err)
		}
		if !strings.Contains(logs.String(), "hand-edited") {
			t.Errorf("no note of the hand edit:\n%s", logs.String())
		}
		got.TickIndex = 100
		mustSave(t, s, got)
		data, _ := os.ReadFile(filepath.Join(dir, "ed.json"))
		if !bytes.Contains(data, []byte(`"checksum": "crc32c:`)) {
			t.Fatal("the next save wrote no checksum")
		}
		// The edit is the previous generation now.
		prev, err := os.ReadFile(filepath.Join(dir, "ed.json.prev"))
		if err != nil || !bytes.Contains(prev, []byte(`"tick_index": 99`)) {
			t.Fatalf("the hand-edited file did not become the previous generation: %v", err)
		}
	})

	t.Run("checksum field deleted: accepted", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, Options{})
		twoGenerations(t, s, "ed")
		edit(t, filepath.Join(dir, "ed.json"), func(w map[string]any) { setTick(w); delete(w, "checksum") })
		if got, err := s.Load(ctx, "ed"); err != nil || got.TickIndex != 99 {
			t.Fatalf("Load = %v, %v; want the edited tick 99", got, err)
		}
	})

	t.Run("stale checksum: previous generation, edit kept aside", func(t *testing.T) {
		dir := t.TempDir()
		var logs storagetest.LogBuffer
		s := openStore(t, dir, Options{Logger: zerolog.New(&logs)})
		prev, _ := twoGenerations(t, s, "ed")
		edit(t, filepath.Join(dir, "ed.json"), setTick)
		got, err := s.Load(ctx, "ed")
		if err != nil {
			t.Fatal(err)
		}
		storagetest.MustEqual(t, got, prev)
		for _, want := range []string{"ed.json", `set \"checksum\" to \"\"`, "checksum mismatch"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the warning does not say %s:\n%s", want, logs.String())
			}
		}
		got.TickIndex = 5
		mustSave(t, s, got)
		rejected, err := os.ReadFile(filepath.Join(dir, "ed.json.rejected"))
		if err != nil || !bytes.Contains(rejected, []byte(`"tick_index": 99`)) {
			t.Fatalf("the refused edit was not kept aside: %v", err)
		}
		// The previous generation stayed the good one.
		p, err := os.ReadFile(filepath.Join(dir, "ed.json.prev"))
		if err != nil || !bytes.Contains(p, []byte(`"tick_index": 1,`)) {
			t.Fatalf("the previous generation is not tick 1: %v\n%s", err, p)
		}
	})

	t.Run("invalid JSON and no previous: error with line", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, Options{})
		mustSave(t, s, storagetest.Sample("ed", 1))
		path := filepath.Join(dir, "ed.json")
		data, _ := os.ReadFile(path)
		data = bytes.Replace(data, []byte(`"tick_index": 1,`), []byte(`"tick_index": 1,,`), 1)
		os.WriteFile(path, data, 0o600)
		got, err := s.Load(ctx, "ed")
		if !errors.Is(err, plugin.ErrCorrupt) || got != nil {
			t.Fatalf("Load = %v, %v; want ErrCorrupt", got, err)
		}
		line := bytes.Count(data[:bytes.Index(data, []byte(",,"))], []byte("\n")) + 1
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("line %d, column", line)) {
			t.Fatalf("the error does not name %s line %d: %v", path, line, err)
		}
	})

	t.Run("typo in a field name: refused", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, Options{})
		mustSave(t, s, storagetest.Sample("ed", 1))
		edit(t, filepath.Join(dir, "ed.json"), func(w map[string]any) {
			w["checksum"] = ""
			w["snapshot"].(map[string]any)["tick_idnex"] = 3
		})
		_, err := s.Load(ctx, "ed")
		if !errors.Is(err, plugin.ErrCorrupt) || !strings.Contains(err.Error(), "tick_idnex") {
			t.Fatalf("Load: %v; want an error naming the unknown field", err)
		}
	})

	t.Run("another agent's file: refused", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, Options{})
		mustSave(t, s, storagetest.Sample("other", 1))
		os.Rename(filepath.Join(dir, "other.json"), filepath.Join(dir, "ed.json"))
		_, err := s.Load(ctx, "ed")
		if !errors.Is(err, plugin.ErrCorrupt) || !strings.Contains(err.Error(), `agent "other"`) {
			t.Fatalf("Load: %v; want an error naming the other agent", err)
		}
	})
}

// TestChangedBehindItsBack: a person replaces the current file while the
// store runs; the next Save keeps it as the previous generation.
func TestChangedBehindItsBack(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	mustSave(t, s, storagetest.Sample("ext", 1))
	other := openStore(t, dir, Options{})
	ext := storagetest.Sample("ext", 50)
	mustSave(t, other, ext)
	mustSave(t, s, storagetest.Sample("ext", 2))
	if err := os.Remove(filepath.Join(dir, "ext.json")); err != nil {
		t.Fatal(err)
	}
	prev, err := openStore(t, dir, Options{}).Load(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, prev, ext)
}

func result(id string, seq uint64) agent.Result {
	return agent.Result{Seq: seq, TaskID: fmt.Sprintf("t%d", seq), AgentID: id, Status: agent.ResultDone,
		Output: json.RawMessage(fmt.Sprintf(`"out %d"`, seq)), TickIndex: seq}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func TestTaskIndex(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	dir := t.TempDir()
	s := openStore(t, dir, Options{Retention: plugin.Retention{MaxTasks: 40, MaxAgeMs: 3600_000}, Now: func() time.Time { return now }})
	path := filepath.Join(dir, "idx.results.jsonl")
	snap := agent.New("idx", 1)
	for seq := uint64(1); seq <= 200; seq++ {
		snap.TickIndex = seq
		snap.Outbox = []agent.Result{result("idx", seq)}
		snap.NextResultSeq = seq + 1
		mustSave(t, s, snap)
		if n := lines(t, path); n > 40+16 {
			t.Fatalf("after %d results the file has %d lines; the bound is 56", seq, n)
		}
	}
	if _, err := s.TaskResult(ctx, "idx", "t150"); !errors.Is(err, plugin.ErrNotFound) {
		t.Fatalf("t150 should be pruned: %v", err)
	}
	if r, err := s.TaskResult(ctx, "idx", "t200"); err != nil || string(r.Output) != `"out 200"` {
		t.Fatalf("t200: %v, %v", r, err)
	}

	// A crash during an append leaves a torn line; the next Save cuts it.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"checksum":"crc32c:00000000","indexed_at":1,"result":{"seq":201,"task_id":"t2`)
	f.Close()
	s = openStore(t, dir, Options{Retention: plugin.Retention{MaxTasks: 40, MaxAgeMs: 3600_000}, Now: func() time.Time { return now }})
	if _, err := s.Load(ctx, "idx"); err != nil {
		t.Fatal(err)
	}
	snap.Outbox = []agent.Result{result("idx", 201)}
	snap.NextResultSeq = 202
	mustSave(t, s, snap)
	if r, err := s.TaskResult(ctx, "idx", "t201"); err != nil || r.Seq != 201 {
		t.Fatalf("t201 after a torn line: %v, %v", r, err)
	}

	// Replayed from an older generation: indexed again, the later line wins.
	snap.Outbox = []agent.Result{result("idx", 190)}
	snap.Outbox[0].Output = json.RawMessage(`"replayed"`)
	snap.NextResultSeq = 191
	mustSave(t, s, snap)
	if r, err := s.TaskResult(ctx, "idx", "t190"); err != nil || string(r.Output) != `"replayed"` {
		t.Fatalf("replayed t190: %v, %v", r, err)
	}

	// Two hours later every result is past its age.
	now = now.Add(2 * time.Hour)
	snap.Outbox = nil
	mustSave(t, s, snap)
	if n := lines(t, path); n != 0 {
		t.Fatalf("%d lines older than the retention age kept", n)
	}
}

func TestDamagedResultLine(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	snap := agent.New("dmg", 1)
	snap.Outbox = []agent.Result{result("dmg", 1), result("dmg", 2)}
	mustSave(t, s, snap)
	path := filepath.Join(dir, "dmg.results.jsonl")
	data, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(data, []byte(`"out 1"`), []byte(`"out X"`), 1), 0o600)
	if _, err := s.TaskResult(ctx, "dmg", "t1"); !errors.Is(err, plugin.ErrCorrupt) {
		t.Fatalf("damaged line: %v; want ErrCorrupt", err)
	}
	if r, err := s.TaskResult(ctx, "dmg", "t2"); err != nil || r.Seq != 2 {
		t.Fatalf("t2: %v, %v", r, err)
	}
}

func TestOpenURL(t *testing.T) {
	data := t.TempDir()
	env := plugin.Env{DataDir: data, Log: testLogger(t)}
	for _, tc := range []struct{ url, dir string }{
		{"file://", filepath.Join(data, "snapshots")},
		{"file://" + filepath.Join(data, "abs"), filepath.Join(data, "abs")},
		{"file://" + filepath.Join(data, "r") + "?retention_tasks=5&retention_age=1h", filepath.Join(data, "r")},
	} {
		st, err := plugin.OpenStorage(ctx, tc.url, env)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := st.(*Store).Dir(); got != tc.dir {
			t.Errorf("%s opened %s, want %s", tc.url, got, tc.dir)
		}
		st.Close()
	}
	if _, err := plugin.OpenStorage(ctx, "file:///tmp/x?bogus=1", env); err == nil || !strings.Contains(err.Error(), "unknown parameter") {
		t.Fatalf("unknown parameter: %v", err)
	}
	t.Chdir(data)
	st, err := plugin.OpenStorage(ctx, "file://rel/dir", env)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.(*Store).Dir(); got != filepath.Join(data, "rel", "dir") {
		t.Fatalf("relative URL opened %s", got)
	}
}

// TestUncommittedResults: a save appends its results to the task index
// before its snapshot takes the current name. Killed in between, it leaves
// results of a tick the agent no longer has; after the next Load they are
// neither served nor kept, and the results of committed ticks are.
func TestUncommittedResults(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, dir string, committed []byte) // leaves the files of a save interrupted after its step 1
	}{
		{"before the renames", func(t *testing.T, dir string, committed []byte) {
			os.Remove(filepath.Join(dir, "a.json.prev"))
			if err := os.WriteFile(filepath.Join(dir, "a.json"), committed, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"between the renames", func(t *testing.T, dir string, committed []byte) {
			os.Remove(filepath.Join(dir, "a.json"))
			if err := os.WriteFile(filepath.Join(dir, "a.json.prev"), committed, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs storagetest.LogBuffer
			s := openStore(t, dir, Options{Logger: zerolog.New(&logs)})
			mustSave(t, s, storagetest.Sample("a", 1)) // task-1, task-1-b
			committed, err := os.ReadFile(filepath.Join(dir, "a.json"))
			if err != nil {
				t.Fatal(err)
			}
			mustSave(t, s, storagetest.Sample("a", 10)) // task-10, task-10-b
			tc.kill(t, dir, committed)

			s = openStore(t, dir, Options{Logger: zerolog.New(&logs)})
			got, err := s.Load(ctx, "a")
			if err != nil || got == nil || got.TickIndex != 1 {
				t.Fatalf("Load = %v, %v; want tick 1", got, err)
			}
			for _, task := range []string{"task-10", "task-10-b"} {
				if r, err := s.TaskResult(ctx, "a", task); !errors.Is(err, plugin.ErrNotFound) {
					t.Errorf("TaskResult(%s) of the uncommitted tick = %+v, %v; want ErrNotFound", task, r, err)
				}
			}
			for _, task := range []string{"task-1", "task-1-b"} {
				if r, err := s.TaskResult(ctx, "a", task); err != nil || r.TickIndex != 1 {
					t.Errorf("TaskResult(%s) of the committed tick = %+v, %v", task, r, err)
				}
			}
			for _, ext := range []string{".results.jsonl", ".results.jsonl.copy"} {
				data, _ := os.ReadFile(filepath.Join(dir, "a"+ext))
				if bytes.Contains(data, []byte("task-10")) || !bytes.Contains(data, []byte("task-1-b")) {
					t.Errorf("a%s after the Load:\n%s", ext, data)
				}
			}
			if !strings.Contains(logs.String(), "dropped 2 results") {
				t.Errorf("no warning about the dropped results:\n%s", logs.String())
			}

			// The agent goes on from tick 1; its next results are served.
			mustSave(t, s, storagetest.Sample("a", 3)) // results 4 and 5, above tick 1's
			if r, err := s.TaskResult(ctx, "a", "task-3"); err != nil || r.TickIndex != 3 {
				t.Fatalf("TaskResult(task-3) = %+v, %v", r, err)
			}
		})
	}
}

// TestResultsShownAtCommit: the results a save appends to the task index
// are not served before the save's commit point: a save that fails (or is
// killed) after appending them leaves the agent at its last committed
// tick, whose results alone TaskResult returns.
func TestResultsShownAtCommit(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{Logger: zerolog.Nop()})
	if got, err := s.Load(ctx, "a"); got != nil || err != nil {
		t.Fatalf("Load of a new agent = %v, %v", got, err)
	}
	mustSave(t, s, storagetest.Sample("a", 1))
	// The new generation cannot be written: the save fails after its
	// results were appended to the index (step 1), before its commit.
	if err := os.Mkdir(filepath.Join(dir, ".a.json.tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, storagetest.Sample("a", 10)); err == nil {
		t.Fatal("Save succeeded with a directory in place of its temporary file")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a.results.jsonl")); !bytes.Contains(data, []byte("task-10")) {
		t.Fatalf("the failed save did not reach its step 1; the test proves nothing:\n%s", data)
	}
	if r, err := s.TaskResult(ctx, "a", "task-10"); !errors.Is(err, plugin.ErrNotFound) {
		t.Fatalf("TaskResult of the save that did not commit = %+v, %v; want ErrNotFound", r, err)
	}
	if r, err := s.TaskResult(ctx, "a", "task-1"); err != nil || r.TickIndex != 1 {
		t.Fatalf("TaskResult(task-1) = %+v, %v", r, err)
	}
	os.Remove(filepath.Join(dir, ".a.json.tmp"))
	mustSave(t, s, storagetest.Sample("a", 10))
	if r, err := s.TaskResult(ctx, "a", "task-10"); err != nil || r.TickIndex != 10 {
		t.Fatalf("TaskResult(task-10) once committed = %+v, %v", r, err)
	}
}
