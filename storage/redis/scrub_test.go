package redis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/redis/redistest"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestScrub: the scrub reads back the agent's records and task index from
// a real redis-server and finds what does not check: a flipped record, a
// flipped task entry, a current record gone while the meta names it.
func TestScrub(t *testing.T) {
	srv := redistest.Start(t, "always")
	s := openStore(t, srv.URL("scrub:"), Options{})
	snap := storagetest.Sample("sc", 1)
	for i := range 300 { // more than one HSCAN batch
		snap = snap.Clone()
		snap.TickIndex++
		snap.Outbox = append(snap.Outbox, agent.Result{Seq: snap.NextResultSeq, TaskID: fmt.Sprintf("t%d", i), AgentID: "sc", Status: "done"})
		snap.NextResultSeq++
		if len(snap.Outbox) > 4 {
			snap.Outbox = snap.Outbox[1:]
		}
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 0 || rep.Bytes < 300*40 {
		t.Fatalf("Scrub of a good agent = %+v, %v; want no damage and every entry read", rep, err)
	}

	keys := s.keys("sc")
	flipKey(t, srv, keys[kCur])
	c := srv.Client(t)
	v, err := c.HGet(ctx, keys[kTasks], "t123").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	v[len(v)-2] ^= 0x20
	if err := c.HSet(ctx, keys[kTasks], "t123", v).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Scrub(ctx, "sc")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rep.Damage, "\n")
	if len(rep.Damage) != 2 || !strings.Contains(got, keys[kCur]+": ") || !strings.Contains(got, keys[kTasks]+", task t123: ") {
		t.Fatalf("Scrub found:\n%s\nwant the current record and task t123", got)
	}

	if err := c.Del(ctx, keys[kCur]).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 2 || !strings.Contains(rep.Damage[0], keys[kCur]+" is missing") {
		t.Fatalf("Scrub with the current record gone = %q, %v", rep.Damage, err)
	}
	if rep, err := s.Scrub(ctx, "nobody"); err != nil || len(rep.Damage) != 0 {
		t.Fatalf("Scrub of an agent never stored = %+v, %v", rep, err)
	}
}
