package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/storage/file"
	"github.com/openstarry/openstarry-edge/storage/redis"
	"github.com/openstarry/openstarry-edge/storage/redis/redistest"
	"github.com/openstarry/openstarry-edge/storage/sqlite"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

var ctx = context.Background()

// agents returns n snapshots that differ in every way a store might get
// wrong: nil and empty lists, long and slid histories, odd ids, big and
// unicode content, every optional field or none.
func agents(n int) []*agent.Snapshot {
	var out []*agent.Snapshot
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("agent-%02d", i)
		switch i % 5 {
		case 1:
			id = fmt.Sprintf("fleet:%02d.worker_%d", i, i)
		case 3:
			id = strings.Repeat("x", agent.MaxIDLen-2) + fmt.Sprintf("%02d", i)
		}
		s := storagetest.Sample(id, uint64(i))
		switch i % 7 {
		case 0: // a long slid history
			s.HistorySeq = uint64(1000 * i)
			for j := 0; j < 200+i; j++ {
				s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, agent.Message{
					Role: "assistant", Content: fmt.Sprintf("%d: %s", j, strings.Repeat("ü☃", j%40)), TaskID: fmt.Sprint(j / 3),
				})
			}
		case 1: // nil lists and no optional fields
			s.Memory.ShortTermHistory, s.EventQueueBackup, s.Memory.WorkingVariables = nil, nil, nil
			s.Outbox, s.PendingAction, s.RecentEventIDs, s.SessionID, s.NextResultSeq = nil, nil, nil, "", 0
		case 2: // a blank agent
			s = agent.New(id, int64(i))
		case 3: // the bare contract of schema version 0
			s.SchemaVersion = 0
			s.Status = agent.StatusStopped
		case 4: // a big queue
			for j := 0; j < 100; j++ {
				s.EventQueueBackup = append(s.EventQueueBackup, agent.Event{
					Source: "mqtt", Type: "task", ID: fmt.Sprintf("e%d", j),
					Payload: json.RawMessage(fmt.Sprintf(`{"input":"task %d","n":[%d,%d.5,true,null]}`, j, j, j)),
				})
			}
			s.QueueSeq = 77
		case 5: // a large working memory
			s.Memory.WorkingVariables["blob"] = strings.Repeat("0123456789", 5000)
		}
		out = append(out, s)
	}
	return out
}

func logger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// TestRoundTrip moves 50 agents through every store and back to where they
// started: bbolt → sqlite → file → redis → bbolt. Each hop and the whole
// trip must keep every snapshot's contract JSON byte for byte.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	srv := redistest.Start(t, "always")
	open := map[string]func() plugin.Storage{
		"bbolt": func() plugin.Storage {
			s, err := bbolt.Open(filepath.Join(dir, "bbolt"), bbolt.Options{Logger: logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"bbolt-back": func() plugin.Storage {
			s, err := bbolt.Open(filepath.Join(dir, "bbolt-back"), bbolt.Options{Logger: logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"sqlite": func() plugin.Storage {
			s, err := sqlite.Open(ctx, filepath.Join(dir, "state.db"), sqlite.Options{Logger: logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"file": func() plugin.Storage {
			s, err := file.Open(ctx, filepath.Join(dir, "snapshots"), file.Options{Logger: logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func() plugin.Storage {
			s, err := redis.Open(ctx, srv.URL("migrate:"), redis.Options{Logger: logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}

	originals := agents(50)
	want := map[string][]byte{}
	var ids []string
	first := open["bbolt"]()
	for _, s := range originals {
		js, err := agent.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		want[s.AgentID] = js
		ids = append(ids, s.AgentID)
		if err := first.Save(ctx, s); err != nil {
			t.Fatalf("seed %s: %v", s.AgentID, err)
		}
	}
	slices.Sort(ids)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	hops := []string{"bbolt", "sqlite", "file", "redis", "bbolt-back"}
	for i := 0; i+1 < len(hops); i++ {
		from, to := open[hops[i]](), open[hops[i+1]]()
		rep, err := Migrate(ctx, from, to, logger(t))
		if err != nil {
			t.Fatalf("%s → %s: %v", hops[i], hops[i+1], err)
		}
		if len(rep.Copied) != 50 || len(rep.Skipped) != 0 || len(rep.Mismatches) != 0 {
			t.Fatalf("%s → %s: %+v", hops[i], hops[i+1], rep)
		}
		if !slices.Equal(slices.Sorted(slices.Values(rep.Copied)), ids) {
			t.Fatalf("%s → %s copied %q", hops[i], hops[i+1], rep.Copied)
		}
		t.Logf("%s → %s: %d agents, %d bytes, %v", hops[i], hops[i+1], len(rep.Copied), rep.Bytes, rep.Duration)
		// Close both, so that the check below reads the destination as a
		// restarted process would.
		if err := from.Close(); err != nil {
			t.Fatal(err)
		}
		if err := to.Close(); err != nil {
			t.Fatal(err)
		}
	}

	back := open["bbolt-back"]()
	defer back.Close()
	for _, id := range ids {
		got, err := back.Load(ctx, id)
		if err != nil || got == nil {
			t.Fatalf("%s after the round trip: %v, %v", id, got, err)
		}
		js, _ := agent.Encode(got)
		if !bytes.Equal(js, want[id]) {
			t.Fatalf("%s changed on the round trip: %s", id, firstDifference(js, want[id]))
		}
	}
}

// mem is a map store for the failure tests; tamper changes what Load
// returns.
type mem struct {
	snaps  map[string]*agent.Snapshot
	tamper func(*agent.Snapshot)
	broken map[string]error // Load errors by agent
}

func newMem() *mem {
	return &mem{snaps: map[string]*agent.Snapshot{}, broken: map[string]error{}}
}

func (m *mem) Save(_ context.Context, s *agent.Snapshot) error {
	m.snaps[s.AgentID] = s.Clone()
	return nil
}

func (m *mem) Load(_ context.Context, id string) (*agent.Snapshot, error) {
	if err := m.broken[id]; err != nil {
		return nil, err
	}
	s := m.snaps[id]
	if s == nil {
		return nil, nil
	}
	c := s.Clone()
	if c.Memory.ShortTermHistory == nil && s.Memory.ShortTermHistory != nil {
		c.Memory.ShortTermHistory = []agent.Message{}
	}
	if c.EventQueueBackup == nil && s.EventQueueBackup != nil {
		c.EventQueueBackup = []agent.Event{}
	}
	if m.tamper != nil {
		m.tamper(c)
	}
	return c, nil
}

func (m *mem) Delete(_ context.Context, id string) error { delete(m.snaps, id); return nil }
func (m *mem) Close() error                              { return nil }

// listing is a mem that lists agents, some of which it may not have.
type listing struct {
	*mem
	extra []string
}

func (l listing) List(context.Context) ([]string, error) {
	var ids []string
	for id := range l.snaps {
		ids = append(ids, id)
	}
	ids = append(ids, l.extra...)
	slices.Sort(ids)
	return ids, nil
}

func TestMismatchesAreListed(t *testing.T) {
	src := listing{mem: newMem(), extra: []string{"gone"}}
	for _, s := range agents(6) {
		src.Save(ctx, s)
	}
	src.broken["agent-04"] = fmt.Errorf("bbolt: load agent-04: %w", plugin.ErrCorrupt)
	dst := newMem()
	dst.tamper = func(s *agent.Snapshot) {
		if s.AgentID == "agent-00" {
			s.TickIndex++
		}
	}
	rep, err := Migrate(ctx, src, dst, logger(t))
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("Migrate: %v; want ErrMismatch", err)
	}
	for _, want := range []string{"2 of 7 agents", "agent-00: the copy differs: at byte", "agent-04: load from the source", "stored snapshot is corrupt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if len(rep.Copied) != 4 || !slices.Equal(rep.Skipped, []string{"gone"}) || len(rep.Mismatches) != 2 {
		t.Fatalf("report %+v", rep)
	}
}

func TestSourceMustList(t *testing.T) {
	_, err := Migrate(ctx, newMem(), newMem(), zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "plugin.Lister") {
		t.Fatalf("Migrate from a store that cannot list: %v", err)
	}
}

func TestCancelled(t *testing.T) {
	src := listing{mem: newMem()}
	for _, s := range agents(3) {
		src.Save(ctx, s)
	}
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Migrate(c, src, newMem(), zerolog.Nop()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Migrate with a cancelled context: %v", err)
	}
}
