package bbolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// index writes, in Save's transaction, every result of snap.Outbox with a
// Seq of at least next into the task index, prunes the index beyond
// retention, and returns the new next. A result whose task id is not a valid
// id (agent.ValidateID) cannot be looked up and is skipped with a warning.
// Each id goes into the agent's id filter before its entry is written.
func (s *Store) index(tx wtx, a *agentStore, snap *agent.Snapshot, next uint64, encoded map[uint64][]byte) (uint64, error) {
	ids := a.ids.Load()
	b := tx.bucket(bucketTasks)
	newNext := next
	// The count of time entries is read before the first result indexed
	// and written once after the last: a burst's Save indexes many.
	var count uint64
	counted := false
	for i := range snap.Outbox {
		r := &snap.Outbox[i]
		if r.Seq < next {
			continue // indexed by an earlier Save
		}
		if r.Seq >= newNext {
			newNext = r.Seq + 1
		}
		if err := agent.ValidateID(r.TaskID); err != nil {
			s.log.Warn().Str("agent", snap.AgentID).Uint64("seq", r.Seq).Err(err).
				Msg("result not indexed: its task id cannot be looked up")
			continue
		}
		if b == nil {
			var err error
			if b, err = tx.createBucketIfNotExists(bucketTasks); err != nil {
				return 0, err
			}
		}
		if !counted {
			var err error
			if count, err = taskCount(b.Bucket); err != nil {
				return 0, err
			}
			counted = true
		}
		if ids != nil {
			ids.add(r.TaskID)
		}
		if err := putResult(b, r, snap.Timestamp, encoded[r.Seq], &count); err != nil {
			return 0, err
		}
	}
	if counted {
		if err := putTaskCount(b, count); err != nil {
			return 0, err
		}
	}
	if b != nil {
		b.FillPercent = s.tune.indexFill // for the fold that writes its pages
		if err := s.prune(b, snap); err != nil {
			return 0, err
		}
	}
	if ids != nil && ids.full() {
		// Built again, for twice the ids, from the index as this Save
		// leaves it: the ids added above are in both.
		a.ids.Store(buildIDFilter(tx.Tx))
	}
	return newNext, nil
}

// putResult indexes one result by task id and by the time it finished
// (the snapshot's time when it does not say). js is the result's JSON
// when the Save already encoded it (nil: encoded here). *count is the
// number of time entries, which putResult adds its own to; the caller
// stores it (putTaskCount).
func putResult(b *wbucket, r *agent.Result, snapMs int64, js []byte, count *uint64) error {
	if js == nil {
		var err error
		if js, err = r.AppendJSON(nil); err != nil {
			return fmt.Errorf("result %s: %w", r.TaskID, err)
		}
	}
	ms := r.FinishedAt
	if ms == 0 {
		ms = snapMs
	}
	tk := timeKey(ms, r.Seq)
	if b.Get(tk) == nil {
		*count++
	}
	if err := b.Put(tk, appendFrame(nil, tk, []byte(r.TaskID))); err != nil {
		return err
	}
	ik := idKey(r.TaskID)
	f := append(binary.BigEndian.AppendUint64(make([]byte, frameHeader, frameHeader+8+len(js)), r.Seq), js...)
	return b.Put(ik, sealFrame(f, ik))
}

// prune deletes the oldest entries of the index while there are more than
// Retention.MaxTasks or they finished more than Retention.MaxAgeMs before the
// snapshot's time, at most pruneLimit of them.
func (s *Store) prune(b *wbucket, snap *agent.Snapshot) error {
	count, err := taskCount(b.Bucket)
	if err != nil {
		return err
	}
	ret := s.opts.Retention
	var excess uint64
	if ret.MaxTasks > 0 && count > uint64(ret.MaxTasks) {
		excess = count - uint64(ret.MaxTasks)
	}
	cutoff := int64(math.MinInt64)
	if ret.MaxAgeMs > 0 {
		now := snap.Timestamp
		if now == 0 {
			now = time.Now().UnixMilli()
		}
		cutoff = now - ret.MaxAgeMs
	}
	type entry struct {
		tk, id []byte
		seq    uint64
	}
	var doomed []entry
	c := b.Cursor()
	for k, v := c.Seek([]byte{prefixTaskByTime}); k != nil && k[0] == prefixTaskByTime && len(doomed) < pruneLimit; k, v = c.Next() {
		if uint64(len(doomed)) >= excess && len(k) == 17 && int64(binary.BigEndian.Uint64(k[1:9])) >= cutoff {
			break
		}
		e := entry{tk: append([]byte(nil), k...)}
		if len(k) == 17 {
			e.seq = binary.BigEndian.Uint64(k[9:])
		}
		if id, err := openFrame(k, v); err == nil {
			e.id = append([]byte(nil), id...)
		}
		doomed = append(doomed, e)
	}
	if len(doomed) == 0 {
		return nil
	}
	for _, e := range doomed {
		if err := b.Delete(e.tk); err != nil {
			return err
		}
		if e.id == nil {
			continue
		}
		// The id entry goes only if it is still this result's: a later
		// result of the same task replaced it.
		ik := idKey(string(e.id))
		if v := b.Get(ik); v != nil {
			if p, err := openFrame(ik, v); err != nil || len(p) < 8 || binary.BigEndian.Uint64(p) == e.seq {
				if err := b.Delete(ik); err != nil {
					return err
				}
			}
		}
	}
	count -= min(count, uint64(len(doomed)))
	return putTaskCount(b, count)
}

func timeKey(ms int64, seq uint64) []byte {
	k := make([]byte, 17)
	k[0] = prefixTaskByTime
	binary.BigEndian.PutUint64(k[1:], uint64(max(ms, 0)))
	binary.BigEndian.PutUint64(k[9:], seq)
	return k
}

func idKey(taskID string) []byte {
	return append([]byte{prefixTaskByID}, taskID...)
}

// taskCount returns the number of time entries of the index. A damaged
// counter is rebuilt by counting them.
func taskCount(b *bolt.Bucket) (uint64, error) {
	k := []byte{keyTaskCount}
	v := b.Get(k)
	if v == nil {
		k = []byte{keyTaskCountOld}
		if v = b.Get(k); v == nil {
			return 0, nil
		}
	}
	if p, err := openFrame(k, v); err == nil && len(p) == 8 {
		return binary.BigEndian.Uint64(p), nil
	}
	var n uint64
	c := b.Cursor()
	for k, _ := c.Seek([]byte{prefixTaskByTime}); k != nil && k[0] == prefixTaskByTime; k, _ = c.Next() {
		n++
	}
	return n, nil
}

func putTaskCount(b *wbucket, n uint64) error {
	if old := []byte{keyTaskCountOld}; b.Get(old) != nil {
		if err := b.Delete(old); err != nil {
			return err
		}
	}
	k := []byte{keyTaskCount}
	return b.Put(k, appendFrame(nil, k, binary.BigEndian.AppendUint64(nil, n)))
}

// TaskResult returns the indexed result of a task of the agent, or an error
// wrapping plugin.ErrNotFound when the task is unknown or out of retention,
// or plugin.ErrCorrupt when its entry fails its checksum.
func (s *Store) TaskResult(ctx context.Context, agentID, taskID string) (*agent.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bbolt: task %s of %s: %w", taskID, agentID, err)
	}
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("bbolt: task of agent: %w", err)
	}
	if err := agent.ValidateID(taskID); err != nil {
		return nil, fmt.Errorf("bbolt: task of %s: %w", agentID, err)
	}
	if a, err := s.agents.Get(agentID); err == nil && a != nil {
		if ids := a.ids.Load(); ids != nil && !ids.mayHave(taskID) {
			// Not in the index, without waiting for a Save in progress
			// (idfilter.go).
			return nil, fmt.Errorf("bbolt: task %s of %s: %w", taskID, agentID, plugin.ErrNotFound)
		}
	}
	a, err := s.agent(agentID)
	if err != nil {
		return nil, fmt.Errorf("bbolt: task %s of %s: %w", taskID, agentID, err)
	}
	defer a.mu.Unlock()
	notFound := fmt.Errorf("bbolt: task %s of %s: %w", taskID, agentID, plugin.ErrNotFound)
	if ok, err := s.open(a, false); err != nil {
		return nil, fmt.Errorf("bbolt: task %s of %s: %w", taskID, agentID, err)
	} else if !ok {
		return nil, notFound
	}
	var r *agent.Result
	err = s.view(a, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTasks)
		if b == nil {
			return notFound
		}
		k := idKey(taskID)
		v := b.Get(k)
		if v == nil {
			return notFound
		}
		p, err := openFrame(k, v)
		if err == nil && len(p) < 8 {
			err = fmt.Errorf("%w: %d bytes", errBadFrame, len(p))
		}
		if err == nil {
			r = new(agent.Result)
			err = json.Unmarshal(p[8:], r)
		}
		if err != nil {
			return fmt.Errorf("bbolt: task %s of %s in %s: %v: %w", taskID, agentID, a.path, err, plugin.ErrCorrupt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// damagedTasks counts the entries of the task index that fail their
// checksum. Load runs it once per process: its cost is one read of the
// index (10,000 entries by default).
func damagedTasks(b *bolt.Bucket) int {
	if b == nil {
		return 0
	}
	bad := 0
	_ = b.ForEach(func(k, v []byte) error {
		if v == nil {
			bad++ // a bucket: this index holds none
		} else if _, err := openFrame(k, v); err != nil {
			bad++
		}
		return nil
	})
	return bad
}
