package fts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/storage/memory/fts"
)

func open(t *testing.T, path, coll string) *fts.Engine {
	t.Helper()
	e, err := fts.Open(context.Background(), path, coll)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func put(t *testing.T, e memory.Engine, d memory.Doc) string {
	t.Helper()
	id, err := e.Put(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ids(hits []memory.Hit) []string {
	out := []string{}
	for _, h := range hits {
		out = append(out, h.ID)
	}
	return out
}

func TestStoreSearchDelete(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mem", "memory.db")
	e := open(t, path, "default")
	put(t, e, memory.Doc{ID: "pump", Text: "The pump in greenhouse 2 fails when the pressure drops below 1.2 bar", Metadata: map[string]string{"site": "gh2"}})
	put(t, e, memory.Doc{ID: "valve", Text: "Valve 7 sticks in cold weather"})
	put(t, e, memory.Doc{ID: "both", Text: "pump pressure pump pressure: check the pump before the valve"})
	auto := put(t, e, memory.Doc{Text: "an unnamed note about the pump"})
	if again := put(t, e, memory.Doc{Text: "an unnamed note about the pump"}); again != auto || !strings.HasPrefix(auto, "doc_") {
		t.Fatalf("derived ids %q and %q: the same text must keep one document", auto, again)
	}

	hits, err := e.Search(ctx, "pump pressure", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(hits); len(got) != 3 || got[0] != "both" {
		t.Fatalf("search pump pressure = %v, want both first of 3", got)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Fatalf("hits not best first: %+v", hits)
		}
	}
	if hits[1].ID == "pump" && hits[1].Metadata["site"] != "gh2" {
		t.Fatalf("metadata lost: %+v", hits[1])
	}
	if hits, _ := e.Search(ctx, "pump", 1); len(hits) != 1 {
		t.Fatalf("k=1 gave %d hits", len(hits))
	}

	// Replacing by id, then deleting.
	put(t, e, memory.Doc{ID: "valve", Text: "Valve 7 was replaced in March"})
	if hits, _ := e.Search(ctx, "cold", 10); len(hits) != 0 {
		t.Fatalf("old text still found: %v", ids(hits))
	}
	if err := e.Delete(ctx, "valve"); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, "valve"); err != nil {
		t.Fatalf("deleting a missing document: %v", err)
	}
	if hits, _ := e.Search(ctx, "march", 10); len(hits) != 0 {
		t.Fatalf("deleted document found: %v", ids(hits))
	}

	// Another collection in the same file sees none of it; a reopened
	// engine sees all of it.
	other := open(t, path, "other")
	if hits, _ := other.Search(ctx, "pump", 10); len(hits) != 0 {
		t.Fatalf("collections leak: %v", ids(hits))
	}
	_ = e.Close()
	again := open(t, path, "default")
	if hits, _ := again.Search(ctx, "pump", 10); len(hits) != 3 {
		t.Fatalf("after reopen: %v", ids(hits))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("memory.db mode %v %v, want 0600", fi.Mode(), err)
	}
}

func TestBadDocuments(t *testing.T) {
	e := open(t, filepath.Join(t.TempDir(), "m.db"), "default")
	for _, d := range []memory.Doc{
		{Text: ""},
		{Text: strings.Repeat("x", memory.MaxTextBytes+1)},
		{ID: strings.Repeat("i", memory.MaxIDBytes+1), Text: "x"},
	} {
		if _, err := e.Put(context.Background(), d); err == nil || !strings.Contains(err.Error(), "invalid memory document") {
			t.Fatalf("Put(%.20q…) = %v, want an invalid document error", d.Text, err)
		}
	}
}

// Text a model writes is never FTS5 query syntax: quotes, operators and
// column filters are words or nothing, never an error.
func TestQueriesAreText(t *testing.T) {
	e := open(t, filepath.Join(t.TempDir(), "m.db"), "default")
	put(t, e, memory.Doc{ID: "a", Text: "NEAR the pump, text: AND or NOT"})
	for _, q := range []string{`"`, `pump"`, `NEAR(pump`, `text:pump`, `-pump`, `pump*`, `AND`, `(((`, `^pump`, "", "   ", `日本語`} {
		if _, err := e.Search(context.Background(), q, 5); err != nil {
			t.Fatalf("Search(%q): %v", q, err)
		}
	}
	if hits, _ := e.Search(context.Background(), `text:pump`, 5); len(hits) != 1 {
		t.Fatalf("text:pump found %v", ids(hits))
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	e := open(t, path, "default")
	_ = e.Close()
	// A newer build's file.
	db := open(t, path, "default")
	_ = db.Close()
	if err := fts.SetUserVersion(path, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := fts.Open(context.Background(), path, "default"); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open of a newer schema: %v", err)
	}
}

func FuzzSearchQuery(f *testing.F) {
	for _, q := range []string{"pump", `"`, `a OR b`, `NEAR(a b)`, `col:x`, "\x00", "é*"} {
		f.Add(q)
	}
	e, err := fts.Open(context.Background(), filepath.Join(f.TempDir(), "m.db"), "default")
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Put(context.Background(), memory.Doc{ID: "a", Text: "the pump and the valve"}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := e.Search(context.Background(), q, 3); err != nil {
			t.Fatalf("Search(%q): %v", q, err)
		}
	})
}

// Memory grows; the snapshot does not. An agent with a bbolt store and the
// local memory engine remembers 300 documents of 2 KiB through its tools; its
// snapshot's memory section after 300 is no larger than after 50 (the context budget bounds
// it), while memory.db grows by the documents.
func TestSnapshotDoesNotGrowWithMemory(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	store, err := bbolt.Open(filepath.Join(data, "agents"), bbolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tmpl := &design.Template{Name: "rememberer", Version: "1.0.0", Role: design.RoleMaster,
		Brain: design.Brain{Provider: "echo"}, Tools: []string{"memory_store", "memory_search"},
		ContextBudget: design.ContextBudget{MaxMessages: 20}, Memory: "fts://"}
	if err := (design.Validator{}).CheckTemplate("rememberer", tmpl); err != nil {
		t.Fatal(err)
	}
	rt, err := host.Start(ctx, host.Agent{ID: "m1", Template: tmpl, Store: store, DataDir: data, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx)

	run := func(id string, call any) agent.TaskState {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"call": []any{call}})
		ev, err := agent.TaskEvent(&agent.Task{TaskID: id, Input: in}, "test", time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if r := rt.Submit(ctx, ev); r.Err != nil {
			t.Fatal(r.Err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, ok, err := rt.WaitTask(wctx, id)
		if err != nil || !ok || !st.Final() {
			t.Fatalf("task %s did not finish: %+v (known %v, %v)", id, st, ok, err)
		}
		return st
	}
	snapBytes := func() int {
		s, err := store.Load(ctx, "m1")
		if err != nil || s == nil {
			t.Fatalf("load: %v %v", s, err)
		}
		// The snapshot's memory section (history and working variables):
		// what a stored document could bloat. Its recent event ids grow
		// with the number of tasks, not with what they stored, up to
		// their own bound.
		b, _ := json.Marshal(s.Memory)
		return len(b)
	}
	memBytes := func() int64 {
		var n int64
		for _, f := range []string{"memory.db", "memory.db-wal"} {
			if fi, err := os.Stat(filepath.Join(data, f)); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	var at50 int
	var mem50 int64
	for i := 1; i <= 300; i++ {
		text := fmt.Sprintf("note %d about sensor %d: %s", i, i%17, strings.Repeat("reading ", 250))
		st := run(fmt.Sprint("s", i), map[string]any{"tool": "memory_store", "args": map[string]any{"id": fmt.Sprint("n", i), "text": text}})
		if st.Status != "done" {
			t.Fatalf("memory_store %d: %+v", i, st)
		}
		if i == 50 {
			at50, mem50 = snapBytes(), memBytes()
		}
	}
	at300, mem300 := snapBytes(), memBytes()
	if at300 > at50+64 {
		t.Fatalf("snapshot grew with memory: %d bytes after 50 documents, %d after 300", at50, at300)
	}
	if mem300 < mem50+250*2000 {
		t.Fatalf("memory.db did not grow as documents were stored: %d → %d bytes", mem50, mem300)
	}
	st := run("q", map[string]any{"tool": "memory_search", "args": map[string]any{"query": "note 123", "k": 3}})
	if st.Status != "done" || !strings.Contains(string(st.Output), `"n123"`) {
		t.Fatalf("search: %+v", st)
	}
	t.Logf("snapshot %d → %d bytes; memory %d → %d bytes", at50, at300, mem50, mem300)
	if _, err := plugin.OpenMemory(ctx, "nosuch://", plugin.Env{DataDir: data}); err == nil || !strings.Contains(err.Error(), "fts://") {
		t.Fatalf("unknown scheme: %v", err)
	}
}
