// Package sqlite is the SQL snapshot store: every agent of a device in one
// SQLite database, through modernc.org/sqlite (pure Go, no cgo).
//
// # Promise
//
// Save returns only after the snapshot is durable; after a crash, Load returns
// the old or the new snapshot, never a mix. One Save is one SQLite transaction
// in WAL mode with synchronous=FULL; the COMMIT of that transaction is the
// commit point: the WAL frame carrying it is fsynced before COMMIT returns,
// and a transaction whose commit frame did not reach the disk is rolled back
// when the database is next opened.
//
// # Layout
//
// The URL is sqlite:///abs/path/state.db or sqlite://rel/path.db; an empty
// path means {DataDir}/state.db. Every connection gets its pragmas from the
// DSN: journal_mode=WAL, synchronous=FULL, busy_timeout=5000, foreign_keys=1.
// The schema is versioned with PRAGMA user_version and migrated at Open, in
// one transaction, by the ordered list in schema.go. Version 1 has four tables:
//
//	agents      (agent_id, gen, task_seq, task_count)   one row per agent
//	generations (agent_id, gen, record)                 the last two generations
//	elements    (agent_id, list, seq, data)             list elements: 0 history, 1 queue,
//	                                                    2 outbox, 3 recent event ids
//	tasks       (agent_id, task_id, seq, indexed_at, result)  the task index
//
// A generation record (see internal/record) is the contract JSON of the snapshot with
// short_term_history and event_queue_backup emptied and outbox and
// recent_event_ids left out, plus, for each of the four lists, the range of
// element rows that hold it and the checksum of its last element, all behind a
// CRC-32C. Each element row holds one message, event, result or id as JSON
// behind its own CRC-32C. Records written before the outbox and the recent ids
// became lists hold them inline; they load, and the next Save moves them.
//
// # Cost of a Save
//
// A Save does not rewrite the history, nor the results waiting for the hub.
// The kernel only appends to its lists and drops from their fronts, and
// Snapshot.HistorySeq, QueueSeq, RecentSeq and OutboxSeq give the absolute
// position of element 0 (a result confirmed out of order leaves a hole in the
// outbox's numbering, and the outbox is then written in full once).
// The store caches, per agent, the spans it saved or loaded last and a
// shallow copy of the lists (their strings shared with the kernel's, so
// comparing an element is mostly a pointer check). A Save whose list is the
// cached one with elements dropped from the front and appended at the back
// (the seqs say how many, and every element the two share compares equal)
// inserts only the appended elements, deletes the rows no kept generation
// needs (32 at a time once a list is that long, so that most Saves leave the
// front of the list alone), and writes the small generation record: its I/O
// does not grow with the length of the history. Anything else (an element changed in
// place, a list imported or cut, a first Save with no Load before it in this
// process, a cache made stale by another process, which the stored generation
// number reveals inside the write transaction) writes the whole list under
// fresh keys, above every key in use, so the rows of the previous generation
// are never overwritten.
//
// # Generations and corruption
//
// The previous generation (its record and its element rows) is kept until the
// next Save. Load tries the newest generation first; when its record or one of
// its elements fails a checksum, or an element row is missing, it logs a
// warning and returns the previous generation; when no generation is good it
// returns an error wrapping plugin.ErrCorrupt. SQLite's own corruption errors
// (SQLITE_CORRUPT, SQLITE_NOTADB) are reported wrapping plugin.ErrCorrupt too.
// Load returns nil, nil only when the agent has never been stored.
//
// # Task index
//
// In the same transaction as the snapshot, Save indexes every Result of
// s.Outbox whose Seq is above the highest already indexed for the agent
// (agents.task_seq), keyed by task_id, and prunes at most a bounded number of
// rows per Save beyond the retention (default plugin.DefaultRetention): the
// oldest by Seq over MaxTasks, and those indexed longer ago than MaxAgeMs.
// When a snapshot's NextResultSeq shows that the agent went back (it was
// restored from an older generation), the mark goes back with it so that the
// replayed results are indexed again. After the commit, the results it
// indexed are also appended to a side record beside the generation mark
// (results.go): when a damaged write-ahead log made SQLite drop commits,
// Load puts their results back into the index. Open keeps a copy of the
// database's first page (header.go) and writes it over a damaged one.
//
// # Processes
//
// Several processes may open the same database (the daemon runs one process
// per agent); SQLite's locks keep their transactions apart, busy_timeout
// bounds the wait, and each Save checks the stored generation against its
// cache inside the write transaction. Keeping two processes off the same agent
// is the daemon's job: this store does not lock agents.
package sqlite
