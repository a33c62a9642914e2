package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/internal/crashseed"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// The damage test: a stopped agent's store is damaged at random (bit
// flips, truncation, a zeroed page, in the part of a file in use) and the
// real binary is started on it. Every start must end in one of three
// outcomes:
//
//	loaded newest            the agent came up at the tick it was killed at
//	loaded previous (warned) it came up at an older tick, and said so
//	refused                  it exited 1 with a line naming the store's path
//
// Anything else fails the test: a blank agent ("fresh agent"), a panic, an
// exit without a message, an older tick without a warning, finished results
// gone without a warning, or (bbolt and file) a refused store that was
// changed. The test prints its table of outcomes. make test runs a few
// trials per store; OPENSTARRY_TORTURE=1 (make torture) runs 200 each.
// -crash.seed repeats a run.

const damageAgent = "dmg"

type damageStore struct {
	name string
	args []string // the store flags of openstarry run
	// used returns the files of the store under data and how much of each
	// is in use.
	used func(t *testing.T, data string) map[string]int64
	// bound returns the tasks that damage to the bytes [r[0], r[1]) of the
	// file path (under data, undamaged) may lose: those whose saves' bytes
	// it hit (issue #34). ok is false where no bound is asserted.
	bound func(t *testing.T, path string, r [2]int64, tasks []string) (may map[string]bool, ok bool)
}

var damageStores = []damageStore{
	{"bbolt", nil, func(t *testing.T, data string) map[string]int64 {
		path := filepath.Join(data, "agents", damageAgent, "state.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var used int64
		_ = db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
		files := map[string]int64{path: used}
		// The journal's records since the last fold: those a start replays.
		jpath := filepath.Join(filepath.Dir(path), "state.journal")
		if recs := journalRecords(t, jpath); len(recs) > 0 {
			files[jpath] = recs[len(recs)-1].end
		}
		return files
	}, func(t *testing.T, path string, r [2]int64, tasks []string) (map[string]bool, bool) {
		if filepath.Base(path) == "state.db" {
			// A page of state.db holds the entries of the task index
			// that it holds: damage may lose the tasks whose entries lie
			// in the pages it touched (in use: reachable from the meta
			// page), and nothing else. Meta, branch, freed pages: nothing.
			may := map[string]bool{}
			for id, pg := range boltTaskPages(t, path) {
				if pg[0] < r[1] && r[0] < pg[1] {
					may[id] = true
				}
			}
			return may, true
		}
		// A journal record holds one save: the damage may lose the tasks
		// whose results the records it touched indexed.
		may := map[string]bool{}
		for _, rec := range journalRecords(t, path) {
			if rec.off < r[1] && r[0] < rec.end {
				for _, id := range rec.tasks {
					may[id] = true
				}
			}
		}
		return may, true
	}},
	{"sqlite", []string{"--store", "sqlite://"}, func(t *testing.T, data string) map[string]int64 {
		return sizes(t, filepath.Join(data, "state.db"), filepath.Join(data, "state.db-wal"),
			filepath.Join(data, "state.db-gen", ".results-"+damageAgent))
	}, func(t *testing.T, path string, r [2]int64, tasks []string) (map[string]bool, bool) {
		switch filepath.Base(path) {
		case "state.db-wal":
			// SQLite drops the damaged frame's commit and every one after
			// it (docs/storage-damage.md), and the side record beside the
			// log puts their results back: no result is lost.
			return map[string]bool{}, true
		case ".results-" + damageAgent:
			// The side record is read only when the log went back.
			return map[string]bool{}, true
		}
		return nil, false // SQLite's own b-tree pages: not asserted
	}},
	{"file", []string{"--store", "file://"}, func(t *testing.T, data string) map[string]int64 {
		dir := filepath.Join(data, "snapshots")
		return sizes(t, filepath.Join(dir, damageAgent+".json"), filepath.Join(dir, damageAgent+".json.prev"),
			filepath.Join(dir, damageAgent+".results.jsonl"), filepath.Join(dir, damageAgent+".results.jsonl.copy"))
	}, func(t *testing.T, path string, r [2]int64, tasks []string) (map[string]bool, bool) {
		// Every result is in two files, but a result counts only once the
		// snapshot that indexed it is committed: damage to the newest
		// snapshot (the newest save) may lose the last task's result.
		if filepath.Base(path) == damageAgent+".json" {
			return map[string]bool{tasks[len(tasks)-1]: true}, true
		}
		return map[string]bool{}, true
	}},
}

// A journalRecord is one record of the bbolt journal: where it lies and
// the tasks whose results it indexed.
type journalRecord struct {
	off, end int64
	tasks    []string
}

// journalRecords returns the run of records at the start of the bbolt
// journal at path (those a start replays): each a 16-byte header (CRC-32C,
// length of the operations, number) and its operations, numbered one after
// the other. An operation is a kind ('p' put, 'd' delete, 'c' create), a
// bucket ('t' the task index), then the key and, for a put, the value, each
// as a uvarint length and the bytes; a put in the task index under 'i' +
// task_id indexes that task's result.
func journalRecords(t *testing.T, path string) []journalRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("journal: %v", err)
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var recs []journalRecord
	off, seq := 0, uint64(0)
	for len(b)-off >= 16 {
		n := int(binary.BigEndian.Uint32(b[off+4:]))
		next := binary.BigEndian.Uint64(b[off+8:])
		if n > len(b)-off-16 || (seq != 0 && next != seq+1) || next == 0 ||
			crc32.Checksum(b[off+4:off+16+n], castagnoli) != binary.BigEndian.Uint32(b[off:]) {
			break
		}
		rec := journalRecord{off: int64(off), end: int64(off + 16 + n)}
		ops := b[off+16 : off+16+n]
		field := func() []byte {
			l, w := binary.Uvarint(ops)
			if w <= 0 || l > uint64(len(ops)-w) {
				t.Fatalf("journal record %d: an operation does not decode", next)
			}
			f := ops[w : w+int(l)]
			ops = ops[w+int(l):]
			return f
		}
		for len(ops) >= 2 {
			kind, bucket := ops[0], ops[1]
			ops = ops[2:]
			k := field()
			if kind == 'p' {
				field()
				if bucket == 't' && len(k) > 1 && k[0] == 'i' {
					rec.tasks = append(rec.tasks, string(k[1:]))
				}
			}
		}
		recs = append(recs, rec)
		off, seq = off+16+n, next
	}
	return recs
}

// boltTaskPages returns, for each task whose result the task index of the
// bbolt file at path holds, the bytes [from, to) of the page (with its
// overflow) its entry lies in, among the pages reachable from the newest
// meta page. bbolt's file format (go.etcd.io/bbolt internal/common,
// storage/bbolt/verify.go): little-endian on the machines tests run on; a
// page header of 16 bytes (id, flags, count, overflow), branch elements
// (pos, ksize, pgid) and leaf elements (flags, pos, ksize, vsize) of 16
// bytes with pos relative to the element, bucket values starting with
// their root page (0: an inline page follows a 16-byte header).
func boltTaskPages(t *testing.T, path string) map[string][2]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	ps := int64(le.Uint32(b[16+8:]))
	meta := func(i int64) (root, txid uint64) {
		m := b[i*ps+16:]
		return le.Uint64(m[16:]), le.Uint64(m[48:])
	}
	root, tx0 := meta(0)
	if r1, tx1 := meta(1); tx1 > tx0 {
		root = r1
	}
	pages := map[string][2]int64{}
	var node func(p []byte, span [2]int64, bucket string)
	var walk func(id uint64, bucket string)
	walk = func(id uint64, bucket string) {
		off := int64(id) * ps
		over := int64(le.Uint32(b[off+12:]))
		node(b[off:off+(1+over)*ps], [2]int64{off, off + (1+over)*ps}, bucket)
	}
	node = func(p []byte, span [2]int64, bucket string) {
		flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
		for i := 0; i < count; i++ {
			e := p[16+i*16:]
			if flags == 0x01 {
				walk(le.Uint64(e[8:]), bucket)
				continue
			}
			pos, ks, vs := int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
			k := p[16+i*16+pos : 16+i*16+pos+ks]
			v := p[16+i*16+pos+ks : 16+i*16+pos+ks+vs]
			switch {
			case le.Uint32(e)&1 != 0 && le.Uint64(v) != 0:
				walk(le.Uint64(v), string(k))
			case le.Uint32(e)&1 != 0:
				node(v[16:], span, string(k))
			case bucket == "tasks" && len(k) > 1 && k[0] == 'i':
				pages[string(k[1:])] = span
			}
		}
	}
	walk(root, "")
	return pages
}

func sizes(t *testing.T, paths ...string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("store file: %v", err)
		}
		if fi.Size() > 0 {
			m[p] = fi.Size()
		}
	}
	return m
}

func TestStoreDamage(t *testing.T) {
	trials := 12
	if os.Getenv("OPENSTARRY_TORTURE") != "" {
		trials = 200
	}
	seed := crashseed.Seed(t)
	for i, st := range damageStores {
		t.Run(st.name, func(t *testing.T) {
			damageStoreTrials(t, st, trials, rand.New(rand.NewPCG(seed, uint64(i))))
		})
	}
}

const damageTasks = 24

func damageStoreTrials(t *testing.T, st damageStore, trials int, rng *rand.Rand) {
	// A store with a few finished tasks: the agent stopped cleanly (SQLite
	// checkpoints its WAL into the database), started again, given more
	// tasks and killed, as a crash leaves it.
	base := t.TempDir()
	var tasks []string
	for run := 0; run < 2; run++ {
		c := startChild(t, true, append([]string{"run", "--agent", damageAgent, "--data", base, "--listen", "127.0.0.1:0", "--no-mqtt"}, st.args...)...)
		url := c.url()
		for i := 0; i < damageTasks/2; i++ {
			id := fmt.Sprintf("d%d", len(tasks))
			if code, body, err := postTask(t.Context(), url, damageAgent, []byte(`{"task_id":"`+id+`","input":"x"}`)); err != nil || code != 202 {
				t.Fatalf("task %s: %d %s %v", id, code, body, err)
			}
			waitTask(t, url, damageAgent, id)
			tasks = append(tasks, id)
		}
		if run == 1 {
			c.kill()
			break
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if code, err := c.wait(20 * time.Second); code != 0 || err != nil {
			t.Fatalf("stop: %d %v\n%s", code, err, c.logs())
		}
	}
	files := st.used(t, base)

	// The tick an undamaged copy comes back at.
	newest := -1
	{
		dir := trialDir(t, base)
		r := startDamaged(t, st, dir, tasks)
		if r.outcome != "loaded" || len(r.lost) > 0 {
			t.Fatalf("the undamaged store: %s, results lost: %v\n%s", r.outcome, r.lost, r.logs)
		}
		newest = r.tick
	}

	// One row per file and kind of fault, and one per kind over the files.
	type row struct {
		trials, newest, previous, refused int
		maxLost, over, unbounded          int // over: trials that lost more than the bound
	}
	table := map[string]*row{}
	var failures []string
	var names []string
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	kinds := []storagetest.Damage{storagetest.BitFlip, storagetest.Bytes16, storagetest.ZeroedPage, storagetest.Truncation}
	for i := 0; i < trials; i++ {
		dir := trialDir(t, base)
		rel := names[rng.IntN(len(names))]
		target := filepath.Join(dir, strings.TrimPrefix(rel, base))
		kind := kinds[rng.IntN(len(kinds))]
		what, hit := storagetest.DamageFileRange(t, target, files[rel], kind, rng)
		may, bounded := st.bound(t, rel, hit, tasks)
		before := hashTree(t, dir)
		r := startDamaged(t, st, dir, tasks)
		rows := []*row{}
		for _, key := range []string{filepath.Base(rel) + ", " + kind.String(), "all files, " + kind.String()} {
			if table[key] == nil {
				table[key] = &row{}
			}
			rows = append(rows, table[key])
		}
		count := func(f func(r *row)) {
			for _, r := range rows {
				f(r)
			}
		}
		count(func(x *row) { x.trials++; x.maxLost = max(x.maxLost, len(r.lost)) })
		fail := func(why string) {
			failures = append(failures, fmt.Sprintf("trial %d (%s: %s): %s\n%s", i, filepath.Base(rel), what, why, r.logs))
		}
		switch {
		case r.panicked:
			fail("panicked")
		case r.outcome == "blank":
			fail("came up blank")
		case r.outcome == "exit":
			switch {
			case r.code != 1:
				fail(fmt.Sprintf("exit %d", r.code))
			case !strings.Contains(r.logs, filepath.Dir(target)):
				fail("exit 1 without naming the store's path")
			case st.name == "bbolt" && !strings.Contains(r.logs, "stored snapshot is corrupt"):
				fail("exit 1 without saying the stored snapshot is corrupt")
			case st.name != "sqlite" && hashTree(t, dir) != before:
				fail("refusing the store changed it")
			default:
				count(func(x *row) { x.refused++ })
			}
		case r.tick > newest:
			fail(fmt.Sprintf("came up at tick %d, after the newest %d", r.tick, newest))
		case len(r.lost) > 0 && !r.warned:
			fail(fmt.Sprintf("%d finished results gone without a warning", len(r.lost)))
		case r.tick == newest:
			count(func(x *row) { x.newest++ })
		case !r.warned:
			fail(fmt.Sprintf("came up at tick %d, before the newest %d, without a warning", r.tick, newest))
		default:
			count(func(x *row) { x.previous++ })
		}
		// The bound of issue #34: a fault loses at most the tasks whose
		// saves' bytes it hit; results recorded after it are still served.
		if r.outcome == "loaded" {
			switch over := overBound(r.lost, may, tasks, st.name == "sqlite"); {
			case !bounded:
				count(func(x *row) { x.unbounded++ })
			case over != "":
				count(func(x *row) { x.over++ })
				fail(fmt.Sprintf("lost %v, beyond what the damage hit (%s)", r.lost, over))
			}
		}
		os.RemoveAll(dir)
	}

	var keys []string
	for k := range table {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ai, aj := strings.HasPrefix(keys[i], "all files"), strings.HasPrefix(keys[j], "all files")
		if ai != aj {
			return !ai
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d damaged starts after %d tasks, newest tick %d\n", st.name, trials, len(tasks), newest)
	fmt.Fprintf(&b, "  %-30s %6s %7s %7s %8s %10s %11s\n", "file, fault", "trials", "newest", "older", "refused", "most lost", "over bound")
	var tot row
	for _, k := range keys {
		r := table[k]
		over := strconv.Itoa(r.over)
		if r.unbounded == r.trials-r.refused && r.unbounded > 0 {
			over = "-" // no bound asserted
		}
		fmt.Fprintf(&b, "  %-30s %6d %7d %7d %8d %10d %11s\n", k, r.trials, r.newest, r.previous, r.refused, r.maxLost, over)
		if strings.HasPrefix(k, "all files") {
			tot.trials, tot.newest, tot.previous, tot.refused = tot.trials+r.trials, tot.newest+r.newest, tot.previous+r.previous, tot.refused+r.refused
			tot.maxLost, tot.over = max(tot.maxLost, r.maxLost), tot.over+r.over
		}
	}
	fmt.Fprintf(&b, "  %-30s %6d %7d %7d %8d %10d %11d\n", "total", tot.trials, tot.newest, tot.previous, tot.refused, tot.maxLost, tot.over)
	fmt.Fprintf(&b, "  failures (blank, panic, silent, over the bound, other): %d", len(failures))
	t.Log("\n" + b.String())
	for _, f := range failures {
		t.Error(f)
	}
}

// overBound says how the tasks lost go beyond may, the tasks the damage
// may lose, or "" when they do not. With suffix (SQLite's write-ahead
// log, which drops the damaged commit and every one after it), what is
// lost must also be the last tasks, with none kept after a lost one.
func overBound(lost []string, may map[string]bool, tasks []string, suffix bool) string {
	var beyond []string
	for _, id := range lost {
		if !may[id] {
			beyond = append(beyond, id)
		}
	}
	if len(beyond) > 0 {
		return fmt.Sprintf("%v were not hit", beyond)
	}
	if suffix && len(lost) > 0 {
		gone := map[string]bool{}
		for _, id := range lost {
			gone[id] = true
		}
		for i, id := range tasks {
			if gone[id] {
				for _, later := range tasks[i+1:] {
					if !gone[later] {
						return fmt.Sprintf("%s kept after %s was lost", later, id)
					}
				}
				break
			}
		}
	}
	return ""
}

var (
	tickRe  = regexp.MustCompile(`hydrated at tick (\d+)`)
	panicRe = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[)`)
)

type damageResult struct {
	outcome  string // "loaded", "blank", "exit"
	code     int
	tick     int
	lost     []string // finished tasks the agent no longer answers
	warned   bool
	panicked bool
	logs     string
}

// warnRe matches a warning or an error about the store.
var warnRe = regexp.MustCompile(`"level":"(warn|error)"[^\n]*(damaged|corrupt|lost|missing|went back|older|fails)`)

// startDamaged starts the agent on the store in dir and sees how it comes up.
func startDamaged(t *testing.T, st damageStore, dir string, tasks []string) damageResult {
	t.Helper()
	c := startChild(t, false, append([]string{"run", "--agent", damageAgent, "--data", dir, "--listen", "127.0.0.1:0", "--no-mqtt"}, st.args...)...)
	var r damageResult
	select {
	case url := <-c.addr:
		r.outcome = "loaded"
		for _, id := range tasks {
			if code, ts, err := getTask(url, damageAgent, id); err != nil || code != 200 || ts.Status != "done" {
				r.lost = append(r.lost, id)
			}
		}
		c.kill()
	case <-c.done:
		r.outcome = "exit"
		r.code, _ = c.wait(5 * time.Second)
	case <-time.After(30 * time.Second):
		c.kill()
		r.outcome = "exit"
		r.code = -1
	}
	r.logs = c.logs()
	r.panicked = panicRe.MatchString(r.logs)
	r.warned = warnRe.MatchString(r.logs)
	if strings.Contains(r.logs, `"fresh agent"`) {
		r.outcome = "blank"
	}
	if m := tickRe.FindStringSubmatch(r.logs); m != nil {
		r.tick, _ = strconv.Atoi(m[1])
	}
	return r
}

// trialDir copies the directory src to a new temporary directory.
func trialDir(t *testing.T, src string) string {
	t.Helper()
	dst, err := os.MkdirTemp(t.TempDir(), "trial")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.CopyDir(t, src, dst)
	return dst
}

// hashTree hashes every file under dir but the broker's and the logs'.
func hashTree(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), "broker") {
			return nil
		}
		data, _ := os.ReadFile(p)
		fmt.Fprintf(h, "%s %d\n", p, len(data))
		h.Write(data)
		return nil
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
