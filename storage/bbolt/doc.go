// Package bbolt is the default snapshot store: one bbolt file per agent.
//
// # Promise
//
// Save returns only after the snapshot is durable; after a crash Load returns
// the old or the new snapshot, never a mix. A Save has one of two commit
// points. Most Saves append their changes to the agent's journal as one
// record with a checksum and sync it (journal.go): a record cut short by a
// crash fails its checksum and is not replayed. The others commit to bbolt:
// a Save writes its pages, syncs them, then writes and syncs the meta page
// that makes them reachable; a crash before that last sync leaves the
// previous meta page, and with it the previous snapshot, in force.
//
// # One process per agent
//
// bbolt takes an exclusive flock on a file it opens for writing, and this
// package keeps an agent's file open, and so locked, from its first use
// until Close. That lock is a second line behind OpenStarry's
// one-process-per-agent guard, core/host's AgentLock (described there), and
// also stops a process that opens the store without it (`openstarry
// snapshot`): while one process holds an agent's file, any other process
// that opens the same agent's store fails, after Options.LockTimeout (100ms
// by default), with an error
// wrapping plugin.ErrLocked that reads
//
//	agent "X" is already running: its store DIR/X/state.db is locked by another process
//
// The lock is released by Close, or by the kernel when the process dies, so a
// crashed agent can be started again at once. flock locks belong to an open
// file description: two Stores on one directory in one process exclude each
// other too.
//
// # Layout
//
//	{dir}/{agent_id}/state.db       one bbolt file per agent (directories 0700, files 0600, whatever the umask)
//	{dir}/{agent_id}/state.journal  the Saves not folded into state.db yet (journal.go), 256 KiB
//	{dir}/{agent_id}/state.db.damaged-{time}  a damaged state.db a salvage kept (salvage.go)
//
// The two files are one store: a copy or a backup of an agent takes both
// (or the agent stopped, whose last Close folded its journal).
//
// Agent ids are checked with agent.ValidateID before any path is built from
// them. Inside the file, the "snapshot" bucket holds generation records
// (keyed 'r' + 8-byte big-endian generation), one history message per key
// ('h' + 8-byte key) and one queued event per key ('q' + 8-byte key); the
// "tasks" bucket is the task index, and the small "mark" bucket names the
// generation the last Save wrote and the one it kept (see record.go). A record holds the snapshot's contract
// JSON without history and queue, and for each list the kernel position of
// its first element (Snapshot.HistorySeq, QueueSeq), the key of that element,
// the count, and a checksum of the last element. Every value is framed with
// its length and a CRC-32C (Castagnoli) of key and value, so flipped bytes
// are found.
//
// # Cost of a Save
//
// A Save does not grow with the history or the queue: the kernel only appends
// at their ends and drops from their fronts, so a Save writes the new record
// and the elements appended since the previous Save, and deletes the
// generation no longer kept. Dropped elements are deleted 32 at a time (at
// once while the agent fits one page), so that most Saves write only the
// last page of the lists. Only a list that is not such a continuation of
// the previous Save (the kernel replaced it, or the store has no memory of
// the previous Save because the file was just opened without a Load) is
// written in full, under fresh keys. The store checks the continuation by
// the checksums of the first and the last element the two Saves share, and
// otherwise relies on the kernel's promise never to change an element once
// appended. Those changes, as puts and deletes, are the journal record of the
// Save: one fdatasync and, for an echo task, one or two 4 KiB pages of the
// journal. Every 170 Saves or so the journal is full and its Saves are
// committed to bbolt at once (bbolt's two fdatasyncs, and each page they
// changed written once); bench_test.go measures it.
//
// # Generations and corruption
//
// Each Save writes generation N+1 and keeps generation N, the one it
// replaces. Load tries the newest generation, and when its record or any
// element it references fails its checksum or does not decode, logs a
// warning and returns the previous one; when no generation is good it
// returns an error wrapping plugin.ErrCorrupt that names the file. It never
// answers a corrupt file with a blank agent. A file that is not a bbolt file
// at all is reported the same way and left untouched; Delete removes it.
//
// A file that was ever written never reads as new. A file is created whole
// (bbolt initialises it under a temporary name, then a hard link names it),
// so an empty or cut-short state.db is damage. Before bbolt maps a file,
// verify.go reads its two meta pages and every page reachable from the one
// bbolt will use, and stops at a file whose pages lie past its end or do
// not hold together: bbolt would fault on its mapping (SIGBUS, not
// recoverable) or fail an assertion in a goroutine of its own. bbolt's
// tx.Check runs next. Both cost one read of the pages in use per process
// (BenchmarkOpen). Load also stops at a file with a bucket it does not know
// (a damaged name), or without the snapshot bucket, the mark or the task
// index though it saved them. Such a file is salvaged (salvage.go): rebuilt
// from the values its readable pages hold, every one checked by its frame,
// the damaged file kept beside the new one; what the damaged pages held is
// lost, and only that. A file with nothing left to load is refused and left
// as it was. Load refuses a file whose generation mark names records that
// are not there; when only the newest record is missing it loads the kept
// one with a warning. Opening an undamaged file, and refusing one, write
// nothing. Any panic while opening or reading is damage.
//
// # Task index
//
// The Store is a plugin.TaskIndex: in the transaction of each Save, every
// Result of the outbox not indexed yet (Seq at least one more than the highest
// indexed, a mark kept in the record) is stored by task_id and by finishing
// time, and at most 64 entries beyond Options.Retention are pruned, so the
// index costs a bounded amount per Save. It is also a plugin.Lister.
//
// # Concurrency and resources
//
// A Store is safe for concurrent use. Each agent has a mutex that serialises
// its operations; a Store mutex guards the map of agents. An agent's file is
// opened lazily by its first Load, Save, Delete or TaskResult and stays open
// until Close. Opening a file rebuilds bbolt's freelist by walking the file,
// a cost proportional to its size, paid once per process.
package bbolt
