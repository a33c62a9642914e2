package sqlite

import (
	"context"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
)

// Scrub checks the database's files on the disk (plugin.Scrubber) with
// sqlitedb.Check: SQLite's PRAGMA quick_check reads every page of the
// database (every agent of the device shares it) through the write-ahead
// log, and the log's frames are read back and their checksums verified as
// SQLite would at its next open. SQLite verifies them only then, and drops
// a damaged frame with every commit after it: found by the scrub, the
// damage is logged while the agent still runs, before a restart costs those
// commits. SQLite keeps no second copy of a page, but a damaged frame
// whose page a later frame holds too is never read again: a checkpoint
// then moves the good pages into the database and empties the log (the
// repair).
func (s *Store) Scrub(ctx context.Context, agentID string) (plugin.ScrubReport, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return plugin.ScrubReport{}, fmt.Errorf("sqlite: scrub: %w", err)
	}
	damage, repaired, n, err := sqlitedb.Check(ctx, s.db, s.path)
	if err != nil {
		return plugin.ScrubReport{}, fmt.Errorf("sqlite: scrub: %w", err)
	}
	return plugin.ScrubReport{Bytes: n, Damage: damage, Repaired: repaired}, nil
}
