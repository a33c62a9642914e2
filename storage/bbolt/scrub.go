package bbolt

import (
	"context"
	"fmt"
	"os"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// maxScrubLines bounds the damaged parts one Scrub names; the count of the
// others follows them.
const maxScrubLines = 8

// Scrub checks what the agent's two files hold on the disk (plugin.Scrubber):
//
//   - the journal's records since the last fold, read back after its clean
//     cached pages are dropped (so that the read reaches the card): each
//     must check and carry the next number. The open transaction holds
//     every one of them (the good copy): on damage it is folded into
//     state.db at once, after which the journal is no longer needed;
//   - state.db, as checkFile reads it before bbolt maps it (meta pages,
//     every page reachable, in place and in order), and the frame of every
//     value (its CRC-32C over key and value). Pages bbolt has mapped and in
//     memory are read from the page cache; the others from the disk. On
//     damage the file is salvaged at once (salvage.go), and the agent's next
//     Save writes its snapshot whole from memory, the good copy; the task
//     results the damaged pages held have none.
//
// Scrub holds the agent's lock while it reads (about the cost of opening
// the file, BenchmarkOpen), so the caller runs it when the agent is idle. A
// file not open yet is opened as Load would; a missing one is no damage.
func (s *Store) Scrub(ctx context.Context, agentID string) (rep plugin.ScrubReport, err error) {
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if err := agent.ValidateID(agentID); err != nil {
		return rep, fmt.Errorf("bbolt: scrub: %w", err)
	}
	a, err := s.agent(agentID)
	if err != nil {
		return rep, fmt.Errorf("bbolt: scrub %s: %w", agentID, err)
	}
	defer a.mu.Unlock()
	if ok, err := s.open(a, false); err != nil {
		return rep, fmt.Errorf("bbolt: scrub %s: %w", agentID, err)
	} else if !ok {
		return rep, nil
	}
	defer catchDamage(a.path, &err)()

	more := 0
	damage := func(format string, args ...any) {
		if len(rep.Damage) < maxScrubLines {
			rep.Damage = append(rep.Damage, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}

	// The journal.
	if j := a.jr; j != nil && j.f != nil && j.off > 0 && a.tx != nil {
		if j.off >= j.size {
			// The journal was found damaged when the agent started (that
			// was logged) and the next Save folds: folding now makes
			// state.db whole the sooner.
			if err := s.fold(a, a.tx); err != nil {
				s.rewind(a)
				return rep, fmt.Errorf("bbolt: scrub %s: folding the journal: %w", agentID, err)
			}
			rep.Repaired = append(rep.Repaired, j.path+": damaged when the agent started; the saves replayed from it are now in "+a.path)
		} else {
			dropCache(j.f)
			buf := make([]byte, j.off)
			if _, err := j.f.ReadAt(buf, 0); err != nil {
				return rep, fmt.Errorf("bbolt: scrub %s: journal: %w", agentID, err)
			}
			rep.Bytes += int64(len(buf))
			off, seq := 0, uint64(0)
			for off < len(buf) {
				_, n, num, ok := recordAt(buf, off)
				if !ok || off > 0 && num != seq+1 {
					break
				}
				seq, off = num, off+n
			}
			if off < len(buf) {
				where := fmt.Sprintf("%s: the record at offset %d (after record %d) does not check", j.path, off, seq)
				damage("%s", where)
				// The open transaction holds every record: the good copy.
				if err := s.fold(a, a.tx); err != nil {
					s.rewind(a)
					return rep, fmt.Errorf("bbolt: scrub %s: folding the journal after damage: %w", agentID, err)
				}
				rep.Repaired = append(rep.Repaired, where+": its saves, held in memory, are now in "+a.path)
			}
		}
	}

	// state.db.
	if f, err := os.Open(a.path); err == nil {
		dropCache(f)
		f.Close()
	}
	var first error
	chk, err := checkFileValues(a.path, func(where fmt.Stringer, k, v []byte) {
		if _, err := openFrame(k, v); err != nil {
			damage("%s: %s, key %q: %v", a.path, where, k, err)
			if first == nil {
				first = fmt.Errorf("%s, key %q: %v", where, k, err)
			}
		}
	})
	switch {
	case err != nil:
		damage("%s: %v", a.path, err)
		first = err
	default:
		rep.Bytes += int64(chk.pages) * int64(chk.pageSize)
		if chk.metaErr != nil {
			damage("%s: %v", a.path, chk.metaErr)
			first = chk.metaErr
		}
	}
	if first != nil {
		// The agent's memory holds its whole snapshot: the file is
		// salvaged now, and the next Save, which knows no previous
		// generation, writes every list in full.
		why := fmt.Errorf("%s is damaged: %w", a.path, first)
		_ = a.drop()
		_ = a.db.Close()
		a.db, a.cache = nil, nil
		a.ids.Store(nil)
		if _, err := s.reopenSalvaged(a, why); err != nil {
			damage("%s: could not rebuild it: %v", a.path, err)
		} else {
			rep.Repaired = append(rep.Repaired, a.path+": rebuilt from its readable pages; the agent's next save writes its snapshot whole from memory (task results on the damaged pages are lost)")
		}
	}
	if more > 0 {
		rep.Damage = append(rep.Damage, fmt.Sprintf("and %d more", more))
	}
	return rep, nil
}
