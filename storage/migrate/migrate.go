package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// ErrMismatch is returned, wrapped with the list of failures, when one or
// more agents could not be copied or their copy did not read back the same.
var ErrMismatch = errors.New("migration did not verify")

// Report is what Migrate did.
type Report struct {
	// Copied lists the agents copied and verified, in the source's order.
	Copied []string
	// Skipped lists the agents the source listed but had no snapshot for
	// when Migrate loaded them (deleted in between).
	Skipped []string
	// Mismatches lists the agents that failed, and why.
	Mismatches []Mismatch
	// Bytes is the size of the contract JSON of the copied snapshots.
	Bytes int64
	// Duration is how long the migration took.
	Duration time.Duration
}

// Mismatch is one agent that was not copied exactly.
type Mismatch struct {
	AgentID string
	Reason  string
}

func (m Mismatch) String() string { return m.AgentID + ": " + m.Reason }

// Migrate copies every agent of from, which must implement plugin.Lister, to
// to, verifying each copy by loading it back from to and comparing
// agent.Encode of both. It goes on past a failing agent so that the error,
// wrapping ErrMismatch, lists them all; the Report says what was copied
// either way. A cancelled ctx stops it at once with the context's error.
// Agents already in to are overwritten; agents only in to are left alone.
func Migrate(ctx context.Context, from, to plugin.Storage, log zerolog.Logger) (Report, error) {
	start := time.Now()
	var rep Report
	lister, ok := from.(plugin.Lister)
	if !ok {
		return rep, fmt.Errorf("migrate: the source store (%T) cannot list its agents: it does not implement plugin.Lister", from)
	}
	ids, err := lister.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: list the source's agents: %w", err)
	}
	log.Info().Int("agents", len(ids)).Msg("migrate: copying snapshots")
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			rep.Duration = time.Since(start)
			return rep, fmt.Errorf("migrate: stopped after %d of %d agents: %w", len(rep.Copied), len(ids), err)
		}
		n, reason, skipped := copyOne(ctx, from, to, id)
		switch {
		case skipped:
			rep.Skipped = append(rep.Skipped, id)
			log.Warn().Str("agent", id).Msg("migrate: listed by the source but no snapshot is stored; skipped")
		case reason != "":
			if err := ctx.Err(); err != nil {
				rep.Duration = time.Since(start)
				return rep, fmt.Errorf("migrate: stopped after %d of %d agents: %w", len(rep.Copied), len(ids), err)
			}
			rep.Mismatches = append(rep.Mismatches, Mismatch{AgentID: id, Reason: reason})
			log.Error().Str("agent", id).Str("reason", reason).Msg("migrate: agent not copied")
		default:
			rep.Copied = append(rep.Copied, id)
			rep.Bytes += int64(n)
			log.Debug().Str("agent", id).Int("bytes", n).Msg("migrate: copied and verified")
		}
	}
	rep.Duration = time.Since(start)
	log.Info().Int("copied", len(rep.Copied)).Int("skipped", len(rep.Skipped)).Int("failed", len(rep.Mismatches)).
		Int64("bytes", rep.Bytes).Dur("took", rep.Duration).Msg("migrate: done")
	if len(rep.Mismatches) > 0 {
		lines := make([]string, len(rep.Mismatches))
		for i, m := range rep.Mismatches {
			lines[i] = m.String()
		}
		return rep, fmt.Errorf("migrate: %d of %d agents not copied exactly:\n  %s\n%w",
			len(rep.Mismatches), len(ids), strings.Join(lines, "\n  "), ErrMismatch)
	}
	return rep, nil
}

// copyOne copies one agent and returns the size of its contract JSON, or
// why it failed, or that the source had nothing for it.
func copyOne(ctx context.Context, from, to plugin.Storage, id string) (n int, reason string, skipped bool) {
	snap, err := from.Load(ctx, id)
	if err != nil {
		return 0, fmt.Sprintf("load from the source: %v", err), false
	}
	if snap == nil {
		return 0, "", true
	}
	want, err := agent.Encode(snap)
	if err != nil {
		return 0, fmt.Sprintf("encode: %v", err), false
	}
	if err := to.Save(ctx, snap); err != nil {
		return 0, fmt.Sprintf("save to the destination: %v", err), false
	}
	back, err := to.Load(ctx, id)
	if err != nil {
		return 0, fmt.Sprintf("load back from the destination: %v", err), false
	}
	if back == nil {
		return 0, "the destination has no snapshot after saving one", false
	}
	got, err := agent.Encode(back)
	if err != nil {
		return 0, fmt.Sprintf("encode the copy: %v", err), false
	}
	if !bytes.Equal(got, want) {
		return 0, "the copy differs: " + firstDifference(got, want), false
	}
	return len(want), "", false
}

// firstDifference says where two JSON texts part.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-30)
	return fmt.Sprintf("at byte %d of %d (copy has %d): copy …%s… source …%s…",
		i, len(want), len(got), got[min(from, len(got)):min(i+30, len(got))], want[min(from, len(want)):min(i+30, len(want))])
}
