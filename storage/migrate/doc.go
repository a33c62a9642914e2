// Package migrate copies every agent's snapshot from one store to another and
// proves each copy: after saving it in the destination it loads it back and
// compares its contract JSON, byte for byte, with what the source gave.
//
// Only snapshots move. Task index entries (plugin.TaskIndex) stay behind: they
// are a cache of delivered results for the retention window, and the outbox
// of each snapshot, which does move, holds every result not yet delivered.
// Stop the agents before migrating: a snapshot saved to the source during the
// migration may or may not be copied.
//
// The invariant: when Migrate returns no error, every agent the source listed
// (and still had) loads from the destination as the very contract JSON it
// loaded from the source. The destination's own durability promise covers
// the rest; the source is only read.
//
// Its test moves 50 agents bbolt → sqlite → file → redis → bbolt and
// compares them with the originals byte for byte.
package migrate
