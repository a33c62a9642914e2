package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations is the schema, as an ordered list: migrations[i] takes the
// database from user_version i to i+1. Append to it; never edit or reorder
// an entry that has shipped, since databases in the field are at every
// version already released.
var migrations = [][]string{
	// 1: snapshots as generation records plus element rows, and the task index.
	{
		`CREATE TABLE agents (
			agent_id   TEXT PRIMARY KEY NOT NULL,
			gen        INTEGER NOT NULL,  -- newest generation saved
			task_seq   INTEGER NOT NULL,  -- highest Result.Seq indexed
			task_count INTEGER NOT NULL   -- rows in tasks for the agent
		) WITHOUT ROWID`,
		`CREATE TABLE generations (
			agent_id TEXT NOT NULL,
			gen      INTEGER NOT NULL,
			record   BLOB NOT NULL,       -- see internal/record
			PRIMARY KEY (agent_id, gen)
		)`,
		`CREATE TABLE elements (
			agent_id TEXT NOT NULL,
			list     INTEGER NOT NULL,    -- 0 short_term_history, 1 event_queue_backup
			seq      INTEGER NOT NULL,    -- storage key, see record.Span.Key
			data     BLOB NOT NULL,       -- CRC-32C then JSON
			PRIMARY KEY (agent_id, list, seq)
		) WITHOUT ROWID`,
		`CREATE TABLE tasks (
			agent_id   TEXT NOT NULL,
			task_id    TEXT NOT NULL,
			seq        INTEGER NOT NULL,  -- Result.Seq
			indexed_at INTEGER NOT NULL,  -- Unix ms of the Save that indexed it
			result     BLOB NOT NULL,     -- CRC-32C then JSON
			PRIMARY KEY (agent_id, task_id)
		)`,
		`CREATE INDEX tasks_by_seq ON tasks (agent_id, seq)`,
		`CREATE INDEX tasks_by_time ON tasks (agent_id, indexed_at)`,
	},
}

// migrate brings the database to user_version len(list), applying the
// missing entries of list in one transaction. It refuses a database newer
// than list rather than guess at it.
func migrate(ctx context.Context, db *sql.DB, list [][]string) error {
	latest := len(list)
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock): two processes cannot migrate at once
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v == latest:
		return nil
	case v > latest:
		return fmt.Errorf("schema version %d is newer than this build understands (%d): upgrade openstarry", v, latest)
	}
	for i := v; i < latest; i++ {
		for _, stmt := range list[i] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
	}
	// PRAGMA takes no parameters; latest is a small int we own.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, latest)); err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	return tx.Commit()
}
