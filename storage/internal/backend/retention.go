package backend

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Retention returns r with each zero field taken from
// plugin.DefaultRetention. A negative field, no bound, stays as it is.
func Retention(r plugin.Retention) plugin.Retention {
	if r.MaxTasks == 0 {
		r.MaxTasks = plugin.DefaultRetention.MaxTasks
	}
	if r.MaxAgeMs == 0 {
		r.MaxAgeMs = plugin.DefaultRetention.MaxAgeMs
	}
	return r
}

// The query parameters of a store URL that set its retention.
const (
	ParamRetentionTasks = "retention_tasks" // Retention.MaxTasks, a number of tasks
	ParamRetentionAge   = "retention_age"   // Retention.MaxAgeMs, as a Go duration such as 168h
)

// ParseRetention reads the retention parameters of a store URL's query
// (ParamRetentionTasks, ParamRetentionAge) into r, and returns the other
// parameters, which it leaves to the caller; q is not changed. Of a
// parameter given more than once, the last value counts.
func ParseRetention(q url.Values, r *plugin.Retention) (url.Values, error) {
	rest := url.Values{}
	for k, vs := range q {
		if k != ParamRetentionTasks && k != ParamRetentionAge {
			rest[k] = vs
		}
	}
	if vs := q[ParamRetentionTasks]; len(vs) > 0 {
		v := vs[len(vs)-1]
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a number of tasks", ParamRetentionTasks, v)
		}
		r.MaxTasks = n
	}
	if vs := q[ParamRetentionAge]; len(vs) > 0 {
		v := vs[len(vs)-1]
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a duration such as 168h", ParamRetentionAge, v)
		}
		r.MaxAgeMs = d.Milliseconds()
	}
	return rest, nil
}

// OnlyRetention is ParseRetention for a store URL that takes no other
// parameter: any other one is an error, so that a misspelt parameter is
// refused rather than ignored.
func OnlyRetention(q url.Values, r *plugin.Retention) error {
	rest, err := ParseRetention(q, r)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		unknown := slices.Sorted(maps.Keys(rest))
		return fmt.Errorf("unknown parameter %q (known: %s, %s)", unknown[0], ParamRetentionTasks, ParamRetentionAge)
	}
	return nil
}

// PathURL reads a store URL that names a local path (plugin.URLPath):
// scheme:///abs/path, scheme://rel/path, or scheme:// for def under the data
// directory. Its query may only set the retention (OnlyRetention), which
// PathURL reads into r.
func PathURL(u *url.URL, env plugin.Env, def string, r *plugin.Retention) (string, error) {
	path := plugin.URLPath(u)
	if path == "" {
		path = filepath.Join(env.DataDir, def)
	}
	if err := OnlyRetention(u.Query(), r); err != nil {
		return "", err
	}
	return path, nil
}

// Unindexed returns the results of snap.Outbox that a Save adds to the task
// index, given mark, the highest Result.Seq the index holds for the agent,
// and the mark to store with the Save once they are indexed. A result is new
// when its Seq is above the mark; a result without a task id is never
// indexed.
//
// An agent restored from an older generation (NextResultSeq at or below the
// mark) replays results the index may hold from the lost future: then every
// result of its outbox is indexed again, and the mark moves back to
// NextResultSeq-1, or to the highest Seq indexed.
//
// The results point into snap.Outbox.
func Unindexed(snap *agent.Snapshot, mark uint64) (results []*agent.Result, next uint64) {
	floor, next := mark, mark
	if snap.NextResultSeq > 0 && snap.NextResultSeq <= mark {
		floor, next = 0, snap.NextResultSeq-1
	}
	for i := range snap.Outbox {
		r := &snap.Outbox[i]
		if r.Seq <= floor || r.TaskID == "" {
			continue
		}
		results = append(results, r)
		next = max(next, r.Seq)
	}
	return results, next
}

// PruneBatch is how many task index entries one Save deletes at most beyond
// the results it adds, so that pruning keeps up without making a Save slow.
const PruneBatch = 64

// Prune is what one Save deletes of an agent's task index: first the oldest
// entries (by Result.Seq) beyond MaxTasks, then, with what is left of the
// budget, the entries indexed before Cutoff; Budget entries in all at the
// most.
type Prune struct {
	// MaxTasks is how many entries the index keeps; -1 for no bound.
	MaxTasks int64
	// Cutoff is a time in Unix ms, never negative when there is an age
	// bound: entries indexed before it are out of retention. -1 for no
	// age bound.
	Cutoff int64
	// Budget is how many entries the Save deletes at the most.
	Budget int64
}

// PruneFor returns the pruning of a Save, at now (Unix ms), that indexes
// added results under r (a field of r at or below zero is no bound: apply
// Retention first for the defaults).
func PruneFor(r plugin.Retention, now int64, added int) Prune {
	p := Prune{MaxTasks: -1, Cutoff: -1, Budget: int64(PruneBatch + added)}
	if r.MaxTasks > 0 {
		p.MaxTasks = int64(r.MaxTasks)
	}
	if r.MaxAgeMs > 0 {
		p.Cutoff = max(now-r.MaxAgeMs, 0) // before 0 is before any entry
	}
	return p
}
