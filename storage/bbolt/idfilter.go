package bbolt

import (
	"hash/maphash"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// The id filter: TaskResult for a task the index does not hold, without the
// agent's lock.
//
// The runtime asks the task index about every new task id it is handed
// (a duplicate of a task that left its memory long ago is still a
// duplicate), and nearly every answer is "not found". The answer took the
// agent's mutex, which a Save holds until its data is synced: while a busy
// agent's save ran beside its next ticks (core/agent's flight), each new
// task waited there for the disk, and the agent with it (BenchmarkMQTTIngress,
// docs/figures.md). The filter answers most of those at once.
//
// It is a Bloom filter over the task ids of the agent's index, built when
// the agent's file is opened (from the index as the journal's replay left
// it) and added to by every Save before the Save writes the entry, so that
// it holds every id the index holds, and some it no longer does (pruned,
// or written by a Save that failed): a "no" from it is certain, a "maybe"
// is looked up under the lock as before. It is dropped whenever the file
// is closed, and built again with it. Ten bits an id (about 1% false
// positives at its size), sized for twice the ids the index holds,
// rounded up to a power of two: 40 KB for the default retention of 10,000
// tasks; built again from the index when more ids were added than it was
// sized for.
type idFilter struct {
	seed maphash.Seed
	bits []atomic.Uint64
	cap  int          // ids it was sized for
	n    atomic.Int64 // ids added
}

// idFilterBits is the filter's bits per id, idFilterK its probes.
const (
	idFilterBits = 10
	idFilterK    = 7
	minIDFilter  = 1024 // ids the smallest filter is sized for
)

func newIDFilter(ids int) *idFilter {
	c := minIDFilter
	for c < ids {
		c *= 2
	}
	return &idFilter{seed: maphash.MakeSeed(), bits: make([]atomic.Uint64, (c*idFilterBits+63)/64), cap: c}
}

// probes calls fn with each of the bit positions of the id whose hash is
// h (maphash.String or maphash.Bytes of it with f.seed), until fn returns
// false.
func (f *idFilter) probes(h uint64, fn func(word int, mask uint64) bool) {
	h1, h2 := h, h>>32|1
	m := uint64(len(f.bits) * 64)
	for i := range uint64(idFilterK) {
		bit := (h1 + i*h2) % m
		if !fn(int(bit/64), 1<<(bit%64)) {
			return
		}
	}
}

func (f *idFilter) add(id string) { f.addHash(maphash.String(f.seed, id)) }

func (f *idFilter) addHash(h uint64) {
	f.probes(h, func(w int, mask uint64) bool { f.bits[w].Or(mask); return true })
	f.n.Add(1)
}

// mayHave reports false only for an id never added.
func (f *idFilter) mayHave(id string) bool {
	all := true
	f.probes(maphash.String(f.seed, id), func(w int, mask uint64) bool {
		all = f.bits[w].Load()&mask != 0
		return all
	})
	return all
}

// full reports whether more ids were added than it was sized for.
func (f *idFilter) full() bool { return f.n.Load() > int64(f.cap) }

// buildIDFilter returns a filter holding every task id of the index in tx,
// sized for twice as many as the index counts.
func buildIDFilter(tx *bolt.Tx) *idFilter {
	b := tx.Bucket(bucketTasks)
	if b == nil {
		return newIDFilter(0)
	}
	n, _ := taskCount(b) // a size only: a damaged count is rebuilt at the next Save's
	f := newIDFilter(2 * int(min(n, 1<<26)))
	c := b.Cursor()
	for k, _ := c.Seek([]byte{prefixTaskByID}); len(k) > 0 && k[0] == prefixTaskByID; k, _ = c.Next() {
		f.addHash(maphash.Bytes(f.seed, k[1:]))
	}
	return f
}
