// Package redis is the snapshot store for a Redis server, through its own
// small client (internal/resp, which says why it is not a general one).
//
// # Promise
//
// Save returns only after the snapshot is durable; after a crash, Load returns
// the old or the new snapshot, never a mix. Durable means durable on the Redis
// server, and that holds only when the server runs with "appendonly yes" and
// "appendfsync always": then Redis fsyncs its append-only file before it
// answers a write. Open reads both settings with CONFIG GET and logs exactly
// one warning line when they do not say so (or cannot be read), naming what to
// set; the store works either way, but with appendfsync everysec a crash of the
// Redis host can lose up to a second of acknowledged ticks.
//
// A Save is one call of a Lua script (save.lua), which Redis runs atomically
// and writes to its append-only file as one MULTI/EXEC block, so a torn tail
// of the file drops the whole Save or none of it. The server's answer to that
// call is the commit point. When the connection fails, Save returns an error
// wrapping ErrUnavailable: the caller must not acknowledge the tick, and
// whether the save took effect is unknown until the next Load.
//
// # Layout
//
// The URL is redis://[user:password@]host:port/db (rediss:// for TLS),
// parsed by resp.ParseURL with its connection parameters (dial_timeout,
// read_timeout, write_timeout, pool_size), plus three parameters of this
// store, removed before that: prefix (default "openstarry:"),
// retention_tasks and retention_age (a Go duration). Any other parameter is
// an error. Every key starts with the prefix P:
//
//	P agents                 SET of the agent ids stored
//	P agent:ID:meta          HASH gen (generation of cur), taskseq (highest Result.Seq indexed)
//	P agent:ID:cur           STRING the newest generation's record
//	P agent:ID:prev          STRING the previous generation's record
//	P agent:ID:tasks         HASH task_id → indexed result
//	P agent:ID:taskseq       ZSET task_id by Result.Seq
//	P agent:ID:tasktime      ZSET task_id by the Unix ms it was indexed
//
// A record is "OSR1", the CRC-32C of the rest (4 bytes, big endian), the
// generation (8 bytes, big endian) and the contract JSON. An indexed result is
// its CRC-32C (4 bytes) and its JSON.
//
// # Generations and writers
//
// The script keeps the previous generation by renaming cur to prev (an O(1)
// rename, not a copy) before it sets the new cur, and it refuses a Save whose
// expected generation is not the one stored. The store learns the generation
// from Load (or, for a first Save without a Load, by reading it), so of two
// processes that loaded the same agent, the second to save gets an error
// wrapping ErrConflict and plugin.ErrLocked naming both generations instead
// of overwriting the other's tick. When Load finds the current record damaged
// it returns the previous one with a warning, and the next Save overwrites the
// damaged record instead of moving it over the good previous one. With no good
// record Load returns an error wrapping plugin.ErrCorrupt; it returns nil, nil
// only when the agent was never stored.
//
// A Save rewrites the whole snapshot (one SET): its network and append-only
// file cost grows with the history.
//
// # Scrub
//
// Scrub (scrub.go) reads the agent's records and task index back through
// the server and checks each against its CRC-32C; it reports damage and
// rewrites nothing.
//
// # Task index
//
// In the same script call, Save indexes the outbox results whose Seq is above
// taskseq (all of them when the snapshot's NextResultSeq shows the agent went
// back to an older generation), keyed by task_id, and prunes at most a bounded
// number per Save: the lowest Seqs beyond Retention.MaxTasks, then those
// indexed more than Retention.MaxAgeMs ago.
package redis
