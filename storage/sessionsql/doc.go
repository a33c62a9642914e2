// Package sessionsql is session continuity's store (session.Store, the
// plugin sessionstore.sqlite): DATA/sessions.db, a SQLite database (pure
// Go, WAL, synchronous=FULL) with seed 003's tables (projects, sessions,
// tasks, human_approvals) and the approaches, migrated forward by PRAGMA
// user_version. The JSON files beside it (project.json,
// state_checkpoint.json, ...) are core/session's formats, kept by
// storage/sessionfiles; this package holds only the rows. It passes storage/sessiontest.
package sessionsql
