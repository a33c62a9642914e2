package bbolt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDeleteBelow: deleteBelow deletes exactly the elements of its list
// below the limit, across pages and whether or not the transaction has
// already changed the pages it walks, keeps every other key, and logs one
// delete per key it deletes, so that the journal's replay of the log does
// what the Save did.
func TestDeleteBelow(t *testing.T) {
	const n = 3000 // elements a list: a tree of several levels at 100 bytes each
	lists := []byte{prefixHistory, prefixOutbox, prefixQueue}
	cases := []struct {
		name    string
		limit   uint64
		batch   uint64
		touched []uint64 // elements of the list put again first, in the same transaction
		want    uint64   // the first element left
	}{
		{"middle", 1777, 1, nil, 1777},
		{"all", n + 10, 1, nil, n},
		{"one", 1, 1, nil, 1},
		{"below the batch", 20, 32, nil, 0},
		{"a batch", 40, 32, nil, 40},
		{"pages changed first", 2500, 1, []uint64{0, 5, 700, 1500, 2499, 2500, 2999}, 2500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fill := func(path string) *bolt.DB {
				db, err := bolt.Open(path, 0o600, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				if err := db.Update(func(tx *bolt.Tx) error {
					b, err := tx.CreateBucketIfNotExists(bucketSnapshot)
					if err != nil {
						return err
					}
					for _, p := range lists {
						for i := range uint64(n) {
							if err := b.Put(key(p, i), bytes.Repeat([]byte{p}, 100)); err != nil {
								return err
							}
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return db
			}
			db, replayed := fill(filepath.Join(dir, "a.db")), fill(filepath.Join(dir, "b.db"))

			log := &opLog{}
			if err := db.Update(func(tx *bolt.Tx) error {
				b := wtx{Tx: tx, log: log}.bucket(bucketSnapshot)
				for _, i := range tc.touched {
					if err := b.Put(key(prefixOutbox, i), []byte("again")); err != nil {
						return err
					}
				}
				return deleteBelow(b, prefixOutbox, tc.limit, tc.batch)
			}); err != nil {
				t.Fatal(err)
			}
			if err := replayed.Update(func(tx *bolt.Tx) error {
				t := defaultTuning()
				return applyOps(tx, log.b, &t)
			}); err != nil {
				t.Fatal(err)
			}

			for name, d := range map[string]*bolt.DB{"the Save": db, "the replay": replayed} {
				if err := d.View(func(tx *bolt.Tx) error {
					b := tx.Bucket(bucketSnapshot)
					for _, p := range lists {
						from := uint64(0)
						if p == prefixOutbox {
							from = tc.want
						}
						var got []uint64
						c := b.Cursor()
						for k, _ := c.Seek([]byte{p}); k != nil && k[0] == p; k, _ = c.Next() {
							num, ok := keyNum(p, k)
							if !ok {
								return fmt.Errorf("key %x", k)
							}
							got = append(got, num)
						}
						if uint64(len(got)) != n-from || len(got) > 0 && got[0] != from {
							first := "none"
							if len(got) > 0 {
								first = fmt.Sprint(got[0])
							}
							return fmt.Errorf("list %c: %d elements from %s, want %d from %d", p, len(got), first, n-from, from)
						}
						for i, num := range got {
							if num != from+uint64(i) {
								return fmt.Errorf("list %c: element %d is %d", p, i, num)
							}
						}
					}
					return nil
				}); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}
