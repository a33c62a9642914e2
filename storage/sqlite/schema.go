package sqlite

import ()

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
