package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/redis/internal/resp"
)

// maxScrubLines bounds the damaged parts one Scrub names; the count of the
// others follows them.
const maxScrubLines = 8

// scrubBatch is how many task index entries one HSCAN asks for, so that a
// scrub never holds the server for long (Redis runs one command at a time).
const scrubBatch = 256

// Scrub checks what the server holds of the agent (plugin.Scrubber): the
// current and the previous generation's records and every entry of the
// task index, each against the CRC-32C it was written with. Redis keeps
// the data, so this is the end-to-end check: damage in the server's memory,
// its append-only file read back after a restart, or a key overwritten by
// someone else. Nothing is rewritten: a damaged current record is
// replaced by the agent's next Save (Load already answers with the
// previous one), a damaged entry of the task index has no second copy. A
// missing current record while the meta names a generation is damage too.
func (s *Store) Scrub(ctx context.Context, agentID string) (rep plugin.ScrubReport, err error) {
	if err := agent.ValidateID(agentID); err != nil {
		return rep, fmt.Errorf("redis: scrub: %w", err)
	}
	if _, err := s.known.Get(agentID); err != nil {
		return rep, fmt.Errorf("redis: scrub %s: %w", agentID, err)
	}
	more := 0
	damage := func(format string, args ...any) {
		if len(rep.Damage) < maxScrubLines {
			rep.Damage = append(rep.Damage, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	keys := s.keys(agentID)
	rs, err := s.c.Pipeline(ctx, []any{"HMGET", keys[kMeta], "gen", "taskseq"}, []any{"GET", keys[kCur]}, []any{"GET", keys[kPrev]})
	if err != nil {
		return rep, fmt.Errorf("redis: scrub %s: %w", agentID, s.failed(err))
	}
	st, err := parseMeta(rs[0])
	if err != nil {
		damage("%s: %v", keys[kMeta], err)
		st = &state{}
	}
	for i, r := range rs[1:] {
		name := keys[kCur+i]
		b, err := r.Bytes()
		if errors.Is(err, resp.ErrNil) {
			if i == 0 && st.gen > 0 {
				damage("%s is missing, though %s names generation %d", name, keys[kMeta], st.gen)
			}
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("redis: scrub %s: %w", agentID, s.failed(err))
		}
		rep.Bytes += int64(len(b))
		_, snap, err := decodeRecord(b)
		if err == nil && snap.AgentID != agentID {
			err = fmt.Errorf("the record is of agent %q", snap.AgentID)
		}
		if err != nil {
			damage("%s: %v", name, err)
		}
	}
	cursor := "0"
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		r, err := s.c.Do(ctx, "HSCAN", keys[kTasks], cursor, "COUNT", strconv.Itoa(scrubBatch))
		if err == nil {
			err = r.Err()
		}
		if err != nil {
			return rep, fmt.Errorf("redis: scrub %s: %w", agentID, s.failed(err))
		}
		if r.Type != '*' || len(r.Array) != 2 {
			return rep, fmt.Errorf("redis: scrub %s: HSCAN answered %q", agentID, r.Type)
		}
		next, err := r.Array[0].Bytes()
		if err != nil {
			return rep, fmt.Errorf("redis: scrub %s: HSCAN: %w", agentID, err)
		}
		fields, err := r.Array[1].Strings()
		if err != nil {
			return rep, fmt.Errorf("redis: scrub %s: HSCAN: %w", agentID, err)
		}
		for i := 0; i+1 < len(fields); i += 2 {
			rep.Bytes += int64(len(fields[i]) + len(fields[i+1]))
			res, err := decodeResult([]byte(fields[i+1]))
			if err == nil && res.TaskID != fields[i] {
				err = fmt.Errorf("the entry is the result of task %q", res.TaskID)
			}
			if err != nil {
				damage("%s, task %s: %v", keys[kTasks], fields[i], err)
			}
		}
		if cursor = string(next); cursor == "0" {
			break
		}
	}
	if more > 0 {
		rep.Damage = append(rep.Damage, fmt.Sprintf("and %d more", more))
	}
	return rep, nil
}

var _ plugin.Scrubber = (*Store)(nil)
