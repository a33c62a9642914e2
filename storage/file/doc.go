// Package file is the development snapshot store: one pretty-printed JSON file
// per agent, which a person can read, diff and edit.
//
// # Promise
//
// Save returns only after the snapshot is durable; after a crash, Load returns
// the old or the new snapshot, never a mix. A Save writes the new generation
// to a temporary file in the same directory and fsyncs it, renames the
// current file to the previous-generation name, renames the temporary file
// over the current name, and fsyncs the directory. That last fsync is the
// commit point. At every instant a good generation is on disk under one of the
// two names, and a crash between the two renames leaves only the previous
// name, which Load reads. Windows cannot fsync a directory; there each rename
// is made with MOVEFILE_WRITE_THROUGH instead.
//
// This store rewrites the whole file on every Save: that is its nature. Its
// cost grows with the size of the snapshot, history included; use the SQLite
// or bbolt store where that matters.
//
// # Layout
//
// The URL is file:///abs/dir or file://rel/dir; an empty path means
// {DataDir}/snapshots. In that directory, for an agent id ID (with every ':'
// written as %3A, since Windows does not allow ':' in file names):
//
//	ID.json            the current generation
//	ID.json.prev       the previous generation
//	ID.json.rejected   a current file that failed its checks, moved aside by
//	                   the next Save instead of being overwritten
//	ID.results.jsonl   the task index
//	ID.results.jsonl.copy  its copy, written alike (see Task index)
//	.ID.json.tmp       a Save in progress (ids never start with a dot)
//
// The previous generation is not "ID.prev.json": agent ids may contain dots,
// so that would also be the current file of the agent "ID.prev".
//
// A snapshot file is
//
//	{
//	  "checksum": "crc32c:1b2c3d4e",
//	  "generation": 12,
//	  "indexed_seq": 40,
//	  "snapshot": { ...the contract JSON, indented... }
//	}
//
// generation counts the saves; indexed_seq is the highest Result.Seq written
// to the task index. The checksum is the CRC-32C (Castagnoli), in lower-case
// hex, of the text "{generation}\n{indexed_seq}\n" followed by the snapshot
// object in compact form (json.Compact): re-indenting the file does not
// change it, any other change does.
//
// # Editing a snapshot by hand
//
// Stop the agent, edit ID.json, and set "checksum" to "" (or delete the
// line): a file without a checksum is accepted when it is valid JSON, its
// snapshot is valid contract JSON (unknown fields are refused, so a typo is
// reported rather than dropped) and its agent_id matches the file name. Load
// logs that it accepted a hand-edited file, and the next Save writes a
// checksum again. Bit rot or a torn write cannot produce an empty checksum
// (either would have to delete its fifteen characters, and truncation leaves
// invalid JSON), so the rule does not let damage through.
//
// An edited file that keeps its old checksum fails the check like a damaged
// one. Load then warns, naming the file, the two checksums and the fix, and
// returns the previous generation; the next Save moves the refused file to
// ID.json.rejected rather than overwriting it, so the edit is not lost. A file
// that is not valid JSON is reported with its name, line and column. When no
// generation is good, Load returns an error wrapping plugin.ErrCorrupt with
// every reason; it never returns a blank agent, and nil, nil only when neither
// file exists.
//
// # Task index
//
// Before the snapshot's rename, Save appends to ID.results.jsonl one line per
// Result of the outbox whose Seq is above indexed_seq (all of them when the
// snapshot's NextResultSeq shows the agent went back to an older generation)
// and fsyncs it; each line carries its own checksum, and a later line for the
// same task_id wins. A torn last line, left by a crash, is cut off by the next
// Save, whose snapshot then indexes those results again. Pruning is a
// compaction (temporary file, fsync, rename): when the file holds a quarter
// more lines than Retention.MaxTasks, or holds results older than
// Retention.MaxAgeMs and either a quarter of MaxTasks lines were appended
// since the last compaction or an eighth of MaxAgeMs went by, the Save rewrites
// it with the newest MaxTasks results within the age. So one Save in many
// rewrites at most 1.25 MaxTasks lines. TaskResult reads the file.
//
// Every append and every compaction is made to ID.results.jsonl.copy too,
// so a finished result survives damage to one of the two files. Load
// compares them; when they differ it rewrites both with every line either
// holds intact and warns with the number of results recovered, and when a
// line is damaged in both it logs an error with the number lost. It costs
// one more append and fsync per Save that indexes results.
//
// # Processes
//
// The store does not lock files: keeping two processes off the same agent is
// the daemon's job. It notices a file changed behind its back (by a person or
// another process) by its size, modification time and identity, and then
// reads it again before the next Save.
package file
