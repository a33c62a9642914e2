package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/storage/redis/redistest"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

var ctx = context.Background()

// prefixOf maps a suite directory to a key prefix, so that opening the same
// directory again sees the same keys.
func prefixOf(dir string) string {
	h := sha256.Sum256([]byte(dir))
	return "t" + hex.EncodeToString(h[:6]) + ":"
}

// flipKey flips bytes in the middle of a string key.
func flipKey(t *testing.T, srv *redistest.Server, key string) {
	t.Helper()
	c := srv.Client(t)
	b, err := c.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	b[len(b)/2] ^= 0x5a
	b[len(b)/2+1] ^= 0xff
	if err := c.Set(ctx, key, b, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, "always")
	storagetest.Run(t, storagetest.Harness{
		Open: func(t *testing.T, dir string) plugin.Storage {
			s, err := Open(ctx, srv.URL(prefixOf(dir)), Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		},
		CorruptLatest: func(t *testing.T, dir, agentID string) {
			flipKey(t, srv, prefixOf(dir)+"agent:"+agentID+":cur")
		},
		CorruptAll: func(t *testing.T, dir, agentID string) {
			flipKey(t, srv, prefixOf(dir)+"agent:"+agentID+":cur")
			flipKey(t, srv, prefixOf(dir)+"agent:"+agentID+":prev")
		},
	})
}

// BenchmarkSave is storagetest.BenchmarkSave against a local redis-server
// with appendfsync always: the latency of a durable Save (median and 99th
// percentile), the bytes this process wrote per Save (the request on the
// socket), and the bytes the server wrote per Save (server-bytes/save, the
// wchar of its /proc/PID/io: the reply and its append-only file).
func BenchmarkSave(b *testing.B) {
	var srv *redistest.Server
	storagetest.BenchmarkSave(b, func(b *testing.B, _ string) plugin.Storage {
		srv = redistest.Start(b, "always")
		s, err := Open(ctx, srv.URL("bench:"), Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}, storagetest.Meter{Unit: "server-bytes/save", IO: func() string { return fmt.Sprintf("/proc/%d/io", srv.PID()) }})
}

func openStore(t *testing.T, url string, o Options) *Store {
	t.Helper()
	if o.Logger.GetLevel() == zerolog.DebugLevel { // the zero Logger; zerolog.New gives TraceLevel
		o.Logger = zerolog.New(zerolog.NewTestWriter(t))
	}
	s, err := Open(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDurabilityWarning(t *testing.T) {
	for _, tc := range []struct {
		fsync    string
		warnings int
	}{{"everysec", 1}, {"always", 0}} {
		t.Run(tc.fsync, func(t *testing.T) {
			srv := redistest.Start(t, tc.fsync)
			var logs storagetest.LogBuffer
			openStore(t, srv.URL("w:"), Options{Logger: zerolog.New(&logs)})
			got := logs.Lines("warn", "")
			if len(got) != tc.warnings {
				t.Fatalf("%d warnings with appendfsync %s, want %d:\n%s", len(got), tc.fsync, tc.warnings, strings.Join(got, "\n"))
			}
			if tc.warnings == 1 {
				for _, want := range []string{`\"fsync every tick\" does not hold`, `appendfsync always`, `"appendfsync":"everysec"`} {
					if !strings.Contains(got[0], want) {
						t.Errorf("the warning does not say %s:\n%s", want, got[0])
					}
				}
			}
		})
	}
}

// TestServerDown kills the server under a store: Save must fail with an
// error that says so, and after a restart the last acknowledged snapshot is
// there, from the server's append-only file.
func TestServerDown(t *testing.T) {
	srv := redistest.Start(t, "always")
	s := openStore(t, srv.URL("down:"), Options{})
	first := storagetest.Sample("down", 1)
	if err := s.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	srv.Kill()

	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := s.Save(c, storagetest.Sample("down", 2))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Save with the server down: %v; want an error wrapping ErrUnavailable", err)
	}
	for _, want := range []string{"redis: save down", srv.Addr(), "may not be stored"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if _, err := s.Load(c, "down"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Load with the server down: %v", err)
	}

	srv.Restart()
	got, err := s.Load(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, got, first)
	// The store goes on once the server is back.
	if err := s.Save(ctx, storagetest.Sample("down", 3)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	port := loopback.FreePort(t)
	_, err := Open(ctx, fmt.Sprintf("redis://127.0.0.1:%d/0?dial_timeout=1s", port), Options{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprint(port)) {
		t.Fatalf("Open of a closed port: %v", err)
	}
}

// TestTwoWriters: two stores loaded the same agent; the second to save is
// refused instead of overwriting the first one's tick.
func TestTwoWriters(t *testing.T) {
	srv := redistest.Start(t, "always")
	a := openStore(t, srv.URL("two:"), Options{})
	b := openStore(t, srv.URL("two:"), Options{})
	if err := a.Save(ctx, storagetest.Sample("shared", 1)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		if _, err := s.Load(ctx, "shared"); err != nil {
			t.Fatal(err)
		}
	}
	winner := storagetest.Sample("shared", 2)
	if err := a.Save(ctx, winner); err != nil {
		t.Fatal(err)
	}
	err := b.Save(ctx, storagetest.Sample("shared", 3))
	if !errors.Is(err, ErrConflict) || !errors.Is(err, plugin.ErrLocked) {
		t.Fatalf("the second writer's Save: %v; want ErrConflict", err)
	}
	if !strings.Contains(err.Error(), "holds generation 2, this process last saw 1") {
		t.Errorf("the error does not name the generations: %v", err)
	}
	got, err := a.Load(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, got, winner)
	// After loading again, b may go on.
	if _, err := b.Load(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(ctx, storagetest.Sample("shared", 4)); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedCurrentIsNotRotated: after Load fell back to prev, the next
// Save must overwrite the damaged cur, not move it over the good prev.
func TestDamagedCurrentIsNotRotated(t *testing.T) {
	srv := redistest.Start(t, "always")
	var logs storagetest.LogBuffer
	s := openStore(t, srv.URL("rot:"), Options{Logger: zerolog.New(&logs)})
	one, two := storagetest.Sample("rot", 1), storagetest.Sample("rot", 2)
	for _, snap := range []*agent.Snapshot{one, two} {
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	flipKey(t, srv, "rot:agent:rot:cur")
	got, err := s.Load(ctx, "rot")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.MustEqual(t, got, one)
	if len(logs.Lines("warn", "checksum mismatch")) == 0 {
		t.Error("no warning about the damaged record")
	}
	three := storagetest.Sample("rot", 3)
	if err := s.Save(ctx, three); err != nil {
		t.Fatal(err)
	}
	prev, err := srv.Client(t).Get(ctx, "rot:agent:rot:prev").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, snap, err := decodeRecord(prev); err != nil || snap.TickIndex != 1 {
		t.Fatalf("prev after the save: %v, %v; want the good tick 1", snap, err)
	}
}

func TestTaskRetention(t *testing.T) {
	srv := redistest.Start(t, "always")
	now := time.UnixMilli(1_700_000_000_000)
	s := openStore(t, srv.URL("ret:"), Options{
		Retention: plugin.Retention{MaxTasks: 50, MaxAgeMs: 3600_000}, Now: func() time.Time { return now },
	})
	c := srv.Client(t)
	snap := agent.New("ret", 1)
	for seq := uint64(1); seq <= 200; seq++ {
		snap.TickIndex = seq
		snap.Outbox = []agent.Result{{Seq: seq, TaskID: fmt.Sprintf("t%d", seq), AgentID: "ret", Status: agent.ResultDone,
			Output: json.RawMessage(fmt.Sprintf(`"out %d"`, seq))}}
		snap.NextResultSeq = seq + 1
		if err := s.Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.HLen(ctx, "ret:agent:ret:tasks").Val(); n != 50 {
		t.Fatalf("%d results kept, want 50", n)
	}
	if _, err := s.TaskResult(ctx, "ret", "t150"); !errors.Is(err, plugin.ErrNotFound) {
		t.Fatalf("t150 should be pruned: %v", err)
	}
	if r, err := s.TaskResult(ctx, "ret", "t200"); err != nil || string(r.Output) != `"out 200"` {
		t.Fatalf("t200: %v, %v", r, err)
	}

	// Replayed from an older generation: indexed again.
	snap.Outbox[0] = agent.Result{Seq: 190, TaskID: "t190", Status: agent.ResultDone, Output: json.RawMessage(`"replayed"`)}
	snap.NextResultSeq = 191
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if r, err := s.TaskResult(ctx, "ret", "t190"); err != nil || string(r.Output) != `"replayed"` {
		t.Fatalf("replayed t190: %v, %v", r, err)
	}

	now = now.Add(2 * time.Hour)
	snap.Outbox = nil
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tasks", "taskseq", "tasktime"} {
		if n := c.Exists(ctx, "ret:agent:ret:"+k).Val(); n != 0 {
			t.Errorf("%s still holds results past the retention age", k)
		}
	}

	// A damaged indexed result is reported, not returned.
	snap.Outbox = []agent.Result{{Seq: 300, TaskID: "t300", Status: agent.ResultDone}}
	snap.NextResultSeq = 301
	if err := s.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	b := []byte(c.HGet(ctx, "ret:agent:ret:tasks", "t300").Val())
	b[len(b)-3] ^= 0x01
	c.HSet(ctx, "ret:agent:ret:tasks", "t300", b)
	if _, err := s.TaskResult(ctx, "ret", "t300"); !errors.Is(err, plugin.ErrCorrupt) {
		t.Fatalf("damaged result: %v; want ErrCorrupt", err)
	}
}

func TestOpenURL(t *testing.T) {
	srv := redistest.Start(t, "always")
	env := plugin.Env{Log: zerolog.New(zerolog.NewTestWriter(t))}
	st, err := plugin.OpenStorage(ctx, "redis://"+srv.Addr()+"/2?prefix=p1:&retention_tasks=7&retention_age=1h&dial_timeout=2s", env)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*Store)
	if s.Prefix() != "p1:" || s.ret.MaxTasks != 7 || s.ret.MaxAgeMs != 3600_000 || s.c.Options().DB != 2 {
		t.Fatalf("prefix %q retention %+v db %d", s.Prefix(), s.ret, s.c.Options().DB)
	}
	if s.c.Options().DialTimeout != 2*time.Second {
		t.Errorf("dial_timeout=2s read as %v", s.c.Options().DialTimeout)
	}
	if err := s.Save(ctx, storagetest.Sample("u", 1)); err != nil {
		t.Fatal(err)
	}
	db2 := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: 2})
	defer db2.Close()
	if n := db2.Exists(ctx, "p1:agent:u:cur").Val(); n != 1 {
		t.Fatal("the snapshot is not under the prefix in database 2")
	}
	d, err := plugin.OpenStorage(ctx, "redis://"+srv.Addr(), env)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.(*Store).Prefix() != DefaultPrefix {
		t.Errorf("default prefix %q", d.(*Store).Prefix())
	}
	if _, ok := plugin.Lookup("storage.rediss"); !ok {
		t.Error("rediss:// has no plugin")
	}
	if _, err := plugin.OpenStorage(ctx, "redis://"+srv.Addr()+"?bogus=1", env); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown parameter: %v", err)
	}
}

// crashAddrEnv hands the crash test's children the server of their parent.
const crashAddrEnv = "OPENSTARRY_TEST_REDIS_CRASH_ADDR"

// TestCrash is the crash test every backend runs: a child process saving
// tick after tick is killed with SIGKILL in the middle of its Saves, and a
// new store must load the last acknowledged tick or the one in flight. The
// server stays up: what is killed is the store's process, with a script
// call on the wire.
func TestCrash(t *testing.T) {
	addr := os.Getenv(crashAddrEnv)
	if addr == "" && !testing.Short() {
		addr = redistest.Start(t, "always").Addr()
		t.Setenv(crashAddrEnv, addr)
	}
	storagetest.RunCrash(t, storagetest.CrashHarness{Open: func(t *testing.T, dir string) plugin.Storage {
		s, err := Open(ctx, "redis://"+addr+"/0?prefix="+prefixOf(dir), Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}})
}
