// Package backend holds the logic that several storage backends
// (storage/file, storage/sqlite, storage/redis, storage/bbolt) share, so
// that each rule lives in one place:
//
//   - CheckSave: the checks a Save makes before it touches storage;
//   - Agents: a store's per-agent state, refused once the store is closed;
//   - Retention, ParseRetention, OnlyRetention, PathURL: the task-index
//     retention of a store, its defaults, the retention_tasks and
//     retention_age parameters of a store URL, and the URL of a store on a
//     local path;
//   - Unindexed: which outbox results a Save adds to the task index, and
//     the mark it stores;
//   - Prune and PruneBatch: how much of an agent's task index one Save
//     deletes;
//   - EncodeRecord, OpenRecord, EncodeJSON, DecodeJSON, AppendFrame,
//     OpenFrame, Sum and ErrChecksum: the CRC-32C framing of stored records,
//     list elements and values, written once for every backend.
//
// It holds rules, not formats: each backend still defines what it stores
// (its magic, its keys, its file names), and only borrows the framing. The
// package is internal to storage/: its API may change with the backends.
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// CheckSave makes the checks a Save of the backend called name makes before
// it touches storage, in this order: a snapshot at all, a valid agent id, a
// valid snapshot, a live context. The error names the backend, the
// operation and, once it is known to be valid, the agent:
// "name: save: …", "name: save ID: …".
func CheckSave(ctx context.Context, name string, snap *agent.Snapshot) error {
	if snap == nil {
		return errors.New(name + ": save: nil snapshot")
	}
	id := snap.AgentID
	if err := agent.ValidateID(id); err != nil {
		return fmt.Errorf("%s: save: %w", name, err)
	}
	if err := snap.Validate(); err != nil {
		return fmt.Errorf("%s: save %s: %w", name, id, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: save %s: %w", name, id, err)
	}
	return nil
}
