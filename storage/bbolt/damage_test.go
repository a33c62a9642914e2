package bbolt

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// damagedStore saves n generations of agent id, each with one finished
// result, closes the store, and returns the file and the snapshots saved.
func damagedStore(t *testing.T, dir, id string, n int) (string, []*agent.Snapshot) {
	t.Helper()
	s, saved := journaled(t, dir, id, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, id, FileName), saved
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// loadDamaged opens the store in dir, loads id, and returns the snapshot,
// the error and what the store logged.
func loadDamaged(t *testing.T, dir, id string) (*agent.Snapshot, error, *storagetest.LogBuffer) {
	t.Helper()
	var logs storagetest.LogBuffer
	s, err := Open(dir, Options{Logger: zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t)))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap, err := s.Load(ctx, id)
	return snap, err, &logs
}

// mustRefuse checks that loading id fails with ErrCorrupt naming the file,
// and that the file is left as it was.
func mustRefuse(t *testing.T, dir, id, path string) {
	t.Helper()
	before := fileSum(t, path)
	snap, err, _ := loadDamaged(t, dir, id)
	if !errors.Is(err, plugin.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
		t.Fatalf("Load = %v, %v; want an error wrapping ErrCorrupt that names %s", snap != nil, err, path)
	}
	if fileSum(t, path) != before {
		t.Fatal("refusing the file changed it")
	}
}

// patch applies fn to the bytes of the file at path.
func patch(t *testing.T, path string, fn func(b []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mustSalvage checks that loading id from the damaged file at path
// rebuilds it (salvage.go): the load succeeds at tick want (0: any tick),
// an error line says so, the damaged file is kept byte for byte beside the
// new one, every result in tasks is served, and the agent goes on: a Save
// and a restart load it. It returns the snapshot loaded.
func mustSalvage(t *testing.T, dir, id, path string, want uint64, tasks []string) *agent.Snapshot {
	t.Helper()
	before := fileSum(t, path)
	var logs storagetest.LogBuffer
	s, err := Open(dir, Options{Logger: zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t)))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap, err := s.Load(ctx, id)
	if err != nil || snap == nil {
		t.Fatalf("Load = %v, %v; want the agent salvaged", snap != nil, err)
	}
	if want != 0 && snap.TickIndex != want {
		t.Fatalf("Load = tick %d; want %d", snap.TickIndex, want)
	}
	if len(logs.Lines("error", "state.db is damaged: rebuilt from the values its readable pages hold")) != 1 {
		t.Fatalf("no error line about the salvage:\n%s", &logs)
	}
	kept, _ := filepath.Glob(filepath.Join(filepath.Dir(path), damagedPrefix+"*"))
	if len(kept) != 1 || fileSum(t, kept[0]) != before {
		t.Fatalf("the damaged file is not kept as it was: %v", kept)
	}
	for _, task := range tasks {
		if r, err := s.TaskResult(ctx, id, task); err != nil || r.TaskID != task {
			t.Errorf("task %s: %v, %v", task, r, err)
		}
	}
	next := snap.Clone()
	next.TickIndex++
	mustSave(t, s, next)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkLoad(t, mustOpen(t, dir, Options{}), next)
	return snap
}

// taskIDs returns the task ids of the results in saved.
func taskIDs(saved []*agent.Snapshot) []string {
	var ids []string
	for _, r := range saved[len(saved)-1].Outbox {
		ids = append(ids, r.TaskID)
	}
	return ids
}

// TestDamagedBucketName: one bit flipped in the name of the snapshot bucket
// used to read as a new agent, over a task index that still knew its tasks;
// then it was refused. The values are all there: the file is salvaged.
func TestDamagedBucketName(t *testing.T) {
	for _, name := range []string{"snapshot", "tasks", "mark"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, saved := damagedStore(t, dir, "flip", 4)
			patch(t, path, func(b []byte) []byte {
				// Every copy of the name: the live root page's, and those
				// of older root pages, free now.
				n := 0
				for i := bytes.Index(b, []byte(name)); i >= 0; i = bytes.Index(b, []byte(name)) {
					b[i+1] ^= 0x01
					n++
				}
				if n == 0 {
					t.Fatalf("no %q in the file", name)
				}
				return b
			})
			mustSalvage(t, dir, "flip", path, saved[3].TickIndex, taskIDs(saved))
		})
	}
}

// TestMissingRecordIsNotNew: a store whose generation records are gone
// (their keys damaged into other prefixes) is corruption, not a new agent;
// with only the newest gone it loads the previous one and says so.
func TestMissingRecordIsNotNew(t *testing.T) {
	t.Run("newest", func(t *testing.T) {
		dir := t.TempDir()
		path, saved := damagedStore(t, dir, "lost", 4)
		editBucket(t, path, func(b *bolt.Bucket) {
			if err := b.Delete(key(prefixRecord, 4)); err != nil {
				t.Fatal(err)
			}
		})
		snap, err, logs := loadDamaged(t, dir, "lost")
		if err != nil || snap == nil || snap.TickIndex != saved[2].TickIndex {
			t.Fatalf("Load = %v, %v; want the previous generation, tick %d", snap, err, saved[2].TickIndex)
		}
		if len(logs.Lines("warn", "missing")) == 0 {
			t.Fatalf("no warning that the newest generation is missing:\n%s", logs)
		}
	})
	t.Run("all", func(t *testing.T) {
		dir := t.TempDir()
		path, _ := damagedStore(t, dir, "lost", 4)
		editBucket(t, path, func(b *bolt.Bucket) {
			for g := uint64(1); g <= 4; g++ {
				_ = b.Delete(key(prefixRecord, g))
			}
		})
		mustRefuse(t, dir, "lost", path)
	})
}

// TestDamagedFirstMeta: after a single Save, the meta page of that commit
// damaged leaves bbolt the meta page of the empty file it created: that
// used to read as a new agent, then was refused. The pages of the commit
// are intact: the file is salvaged.
func TestDamagedFirstMeta(t *testing.T) {
	dir := t.TempDir()
	path, saved := damagedStore(t, dir, "meta", 1)
	patch(t, path, func(b []byte) []byte {
		b[pageHeaderSize+48] ^= 0x10 // page 0 holds txid 2, the first commit
		return b
	})
	mustSalvage(t, dir, "meta", path, saved[0].TickIndex, taskIDs(saved))
}

// TestTruncatedAndZeroed: a file cut short made bbolt fault on its mapping
// (SIGBUS, the process died), a zeroed page made it fail an assertion in a
// goroutine (the process died); then both were refused cleanly. Now the
// file is salvaged: what the lost pages held is lost, the rest is served.
// A file with no generation record left is still refused, unchanged.
func TestTruncatedAndZeroed(t *testing.T) {
	var ps, root, snapRoot, used int
	const n = 300
	cases := []struct {
		name string
		fn   func(b []byte) []byte
		// want: the tick loaded (0: an older one), or refuse.
		want   uint64
		refuse bool
	}{
		{name: "truncated", fn: func(b []byte) []byte { return b[:used*3/4] }},
		{name: "last used page cut", fn: func(b []byte) []byte { return b[:used-ps] }},
		{name: "cut to one page", fn: func(b []byte) []byte { return b[:4096] }, refuse: true},
		{name: "empty", fn: func(b []byte) []byte { return b[:0] }, refuse: true},
		{name: "zeroed root page", fn: func(b []byte) []byte { clear(b[root*ps : (root+1)*ps]); return b }, want: n},
		{name: "zeroed snapshot page", fn: func(b []byte) []byte { clear(b[snapRoot*ps : (snapRoot+1)*ps]); return b }},
		{name: "both meta pages", fn: func(b []byte) []byte { b[40] ^= 1; b[ps+40] ^= 1; return b }, want: n},
	}
	orig, saved := damagedStore(t, t.TempDir(), "cut", n)
	content, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "cut", FileName)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			_ = db.View(func(tx *bolt.Tx) error {
				ps = tx.DB().Info().PageSize
				used = int(tx.Size())
				root = int(tx.Bucket(bucketSnapshot).Root()) // a branch page: 300 records need several leaves
				snapRoot = root
				if info, err := tx.Page(root); err == nil && info.Type == "branch" {
					// a leaf under it: the page after the branch header is the first child's id
					p := make([]byte, ps)
					f, _ := os.Open(path)
					_, _ = f.ReadAt(p, int64(root*ps))
					f.Close()
					snapRoot = int(ne.Uint64(p[pageHeaderSize+8:]))
				}
				return nil
			})
			db.Close()
			patch(t, path, tc.fn)
			if tc.refuse {
				mustRefuse(t, dir, "cut", path)
				return
			}
			var tasks []string
			if tc.want == n {
				tasks = taskIDs(saved) // no page that held one was hit
			}
			mustSalvage(t, dir, "cut", path, tc.want, tasks)
		})
	}
}

// TestCorruptSharedElement: an element every kept generation references
// (a history message written by an older save) is damaged. The agent used
// to be refused (no generation loads whole); now the newest generation
// loads without that message, said at error level: the damage costs what
// it hit. A damaged record still refuses (CorruptAll).
func TestCorruptSharedElement(t *testing.T) {
	dir := t.TempDir()
	_, b := twoGenerations(t, dir, "shared")
	editBucket(t, filepath.Join(dir, "shared", FileName), func(bk *bolt.Bucket) {
		first, ok := firstKey(bk, prefixHistory)
		if !ok {
			t.Fatal("no history element")
		}
		flipValue(t, bk, key(prefixHistory, first))
	})
	snap, err, logs := loadDamaged(t, dir, "shared")
	if err != nil {
		t.Fatalf("Load: %v; want generation 2 without its damaged message", err)
	}
	want := b.Clone()
	want.Memory.ShortTermHistory = want.Memory.ShortTermHistory[1:]
	if g, w := encode(t, snap), encode(t, want); g != w {
		t.Fatalf("loaded\n%s\nwant\n%s", g, w)
	}
	if l := logs.Lines("error", "loaded generation 2 without its damaged elements: 1 history messages"); len(l) != 1 {
		t.Fatalf("no error line:\n%s", logs)
	}
	// The next Save writes the lists whole; a restart loads it.
	s := mustOpen(t, dir, Options{})
	got, err := s.Load(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	got.TickIndex = 3
	mustSave(t, s, got)
	checkLoad(t, mustOpen(t, copyAgent(t, dir, "shared", nil), Options{}), got)
}

// firstKey returns the lowest number under prefix.
func firstKey(b *bolt.Bucket, prefix byte) (uint64, bool) {
	k, _ := b.Cursor().Seek([]byte{prefix})
	return keyNum(prefix, k)
}
