// Package bolttest damages bbolt snapshot files on purpose, for the tests
// (and fire drills) that check a corrupt record is detected and answered with
// the previous generation or a clear error. It knows the layout of
// storage/bbolt: the "snapshot" bucket and the generation records keyed 'r'
// + 8-byte generation; storage/bbolt's own tests use it, so a layout change
// that breaks it fails there first.
package bolttest

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("snapshot")

const prefixRecord = 'r'

// FlipGenerations flips bytes in the middle and at the end of the newest
// generation record of the store file at path (every generation when
// newestOnly is false) and returns how many records it damaged. The store
// must be closed.
func FlipGenerations(path string, newestOnly bool) (int, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return fmt.Errorf("no snapshot bucket in %s", path)
		}
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek([]byte{prefixRecord}); k != nil && k[0] == prefixRecord; k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		if newestOnly && len(keys) > 0 {
			keys = keys[len(keys)-1:]
		}
		for _, k := range keys {
			v := append([]byte(nil), b.Get(k)...)
			if len(v) < 2 {
				return fmt.Errorf("record %x has %d bytes", k, len(v))
			}
			v[len(v)/2] ^= 0xff
			v[len(v)-1] ^= 0x01
			if err := b.Put(k, v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no generation record in %s", path)
	}
	return n, err
}
