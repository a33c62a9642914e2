package bbolt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The bbolt module verify.go was written against. verify.go re-parses
// bbolt's private page format (file format version 2, the layout of
// go.etcd.io/bbolt's internal/common); TestBoltFormatPin fails when the
// module changes, and when the bytes of a file the real bbolt writes stop
// matching what verify.go reads.
const pinnedBoltModule = "go.etcd.io/bbolt v1.5.0"

// boltFormatAdvice is what to do when TestBoltFormatPin fails.
const boltFormatAdvice = `verify.go (checkFile, parseMeta, the walker) re-reads bbolt's private page format before bbolt maps a file, and was checked against ` + pinnedBoltModule + `.
To move to another bbolt: read the diff of go.etcd.io/bbolt's internal/common (page.go, meta.go, bucket.go, types.go) and of db.go's meta page
selection between the two versions; update verify.go's constants (boltMagic, boltVersion, pageHeaderSize, elemSize, metaLen, bucketHeader, the flags)
and its layout comment where they changed; run go test ./storage/bbolt/ (this test and the damage tests); then set pinnedBoltModule to the new version.`

// TestBoltFormatPin pins what verify.go assumes of bbolt: the module
// version in go.mod, and, on files the real bbolt writes (with the store's
// options, and with a synced freelist), that verify.go reads the same meta
// page, page headers, elements, buckets and values bbolt reports.
func TestBoltFormatPin(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?go\.etcd\.io/bbolt\s+(\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatalf("go.mod requires no go.etcd.io/bbolt\n%s", boltFormatAdvice)
	}
	if got := "go.etcd.io/bbolt " + string(m[1]); got != pinnedBoltModule {
		t.Errorf("go.mod requires %s, verify.go was checked against %s\n%s", got, pinnedBoltModule, boltFormatAdvice)
	}
	if regexp.MustCompile(`(?m)^\s*(?:replace\s+)?go\.etcd\.io/bbolt\b.*=>`).Match(mod) {
		t.Errorf("go.mod replaces go.etcd.io/bbolt\n%s", boltFormatAdvice)
	}
	for _, tc := range []struct {
		name           string
		noFreelistSync bool
	}{
		{"store options", true},
		{"synced freelist", false},
	} {
		t.Run(tc.name, func(t *testing.T) { checkRealBoltFile(t, tc.noFreelistSync) })
	}
}

func checkRealBoltFile(t *testing.T, noFreelistSync bool) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("bbolt's file format no longer matches verify.go: "+format+"\n%s", append(args, boltFormatAdvice)...)
	}
	path := filepath.Join(t.TempDir(), "pin.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: noFreelistSync, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	// What is written: a bucket of many keys (branch pages), a value
	// larger than a page (an overflow page), a small bucket (inline), a
	// nested bucket, and a delete (free pages).
	want := map[string]string{}
	var lastTx int
	put := func(b *bolt.Bucket, k, v string) error {
		want[k] = v
		return b.Put([]byte(k), []byte(v))
	}
	for round := 0; round < 3; round++ {
		if err := db.Update(func(tx *bolt.Tx) error {
			big, err := tx.CreateBucketIfNotExists([]byte("big"))
			if err != nil {
				return err
			}
			for i := 0; i < 400; i++ {
				if err := put(big, fmt.Sprintf("big-%04d", i), fmt.Sprintf("value %d of round %d %s", i, round, bytes.Repeat([]byte{'x'}, i%50))); err != nil {
					return err
				}
			}
			if err := put(big, "big-overflow", string(bytes.Repeat([]byte{'o'}, 3*db.Info().PageSize))); err != nil {
				return err
			}
			small, err := tx.CreateBucketIfNotExists([]byte("small"))
			if err != nil {
				return err
			}
			if err := put(small, "small-1", fmt.Sprint("round ", round)); err != nil {
				return err
			}
			nested, err := big.CreateBucketIfNotExists([]byte("nested"))
			if err != nil {
				return err
			}
			if err := put(nested, "nested-1", "inner"); err != nil {
				return err
			}
			lastTx = tx.ID()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		delete(want, "big-0007")
		lastTx = tx.ID()
		return tx.Bucket([]byte("big")).Delete([]byte("big-0007"))
	}); err != nil {
		t.Fatal(err)
	}
	pageSize := db.Info().PageSize

	// What bbolt reports of its newest commit.
	tx, err := db.Begin(true) // Page needs a writable transaction; rolled back
	if err != nil {
		t.Fatal(err)
	}
	size := tx.Size()
	var treePages int
	for _, name := range []string{"big", "small"} {
		s := tx.Bucket([]byte(name)).Stats()
		treePages += s.BranchPageN + s.BranchOverflowN + s.LeafPageN + s.LeafOverflowN
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m0, m1 := parseMeta(raw), parseMeta(raw[pageSize:])
	if m0.err != nil || m1.err != nil {
		fail("meta pages 0 and 1 of a file bbolt just wrote: %v, %v", m0.err, m1.err)
	}
	use := m0
	if m1.txid > m0.txid {
		use = m1
	}
	if int(use.pageSize) != pageSize {
		fail("the meta page says page size %d, bbolt uses %d", use.pageSize, pageSize)
	}
	if use.txid != uint64(lastTx) {
		fail("the newest meta page says txid %d, bbolt's last commit was %d", use.txid, lastTx)
	}
	if int64(use.pgid)*int64(pageSize) != size {
		fail("the meta page's high water mark is %d pages of %d bytes, bbolt's tx.Size() is %d", use.pgid, pageSize, size)
	}
	pageAt := func(id uint64) []byte { return raw[id*uint64(pageSize):] }
	info, err := tx.Page(int(use.root))
	if err != nil || info == nil || (info.Type != "leaf" && info.Type != "branch") {
		fail("the meta page's root %d is, to bbolt, %+v (%v)", use.root, info, err)
	}
	if got := ne.Uint16(pageAt(use.root)[10:]); int(got) != info.Count || ne.Uint32(pageAt(use.root)[12:]) != uint32(info.OverflowCount) {
		fail("root page %d: header count %d overflow %d, bbolt says %d and %d", use.root, got, ne.Uint32(pageAt(use.root)[12:]), info.Count, info.OverflowCount)
	}
	pages := 1 + info.OverflowCount + treePages
	switch {
	case noFreelistSync && use.freelist != noFreelist:
		fail("with NoFreelistSync the meta page's freelist is %d, want %#x (none)", use.freelist, noFreelist)
	case !noFreelistSync:
		fl, err := tx.Page(int(use.freelist))
		if err != nil || fl == nil || fl.Type != "freelist" {
			fail("the meta page's freelist %d is, to bbolt, %+v (%v)", use.freelist, fl, err)
		}
		if ne.Uint16(pageAt(use.freelist)[8:]) != flagFreelist {
			fail("freelist page %d has flags %#x, want %#x", use.freelist, ne.Uint16(pageAt(use.freelist)[8:]), flagFreelist)
		}
		pages += 1 + fl.OverflowCount
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// What verify.go reads of the same file.
	got := map[string]string{}
	c, err := checkFileValues(path, func(_ fmt.Stringer, k, v []byte) { got[string(k)] = string(v) })
	if err != nil {
		fail("checkFile refuses a file bbolt wrote: %v", err)
	}
	if c.pageSize != pageSize || c.txid != uint64(lastTx) || c.metaErr != nil {
		fail("checkFile read page size %d, txid %d, meta error %v; bbolt: %d, %d, none", c.pageSize, c.txid, c.metaErr, pageSize, lastTx)
	}
	if c.pages != pages {
		fail("checkFile reached %d pages, bbolt's bucket stats count %d (root, branches, leaves, overflow, freelist)", c.pages, pages)
	}
	if len(got) != len(want) {
		fail("checkFile saw %d values, bbolt holds %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			fail("value %q: checkFile read %d bytes %.40q, bbolt holds %d bytes %.40q", k, len(got[k]), got[k], len(v), v)
		}
	}
}
