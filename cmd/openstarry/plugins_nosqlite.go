//go:build nosqlite

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

// Without SQLite: no sqlite:// store, no fts:// memory engine (an FTS5
// index in a SQLite file) and no session continuity (its store,
// sessions.db, is a SQLite file: every entry point to sessions says so).
func init() {
	plugin.Omit("storage.sqlite", "nosqlite")
	plugin.Omit("memory.fts", "nosqlite")
	plugin.Omit("sessionstore.sqlite", "nosqlite")
	plugin.Omit("sessions.daemon", "nosqlite")
}

// sessionsCompiledIn is what version says of session continuity.
const sessionsCompiledIn = "not compiled in (nosqlite)"
