//go:build nosqlite

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

// Without SQLite: no sqlite:// store, no fts:// memory engine (an FTS5
// index in a SQLite file) and no session continuity (sessions_nosqlite.go).
func init() {
	plugin.Omit("storage.sqlite", "nosqlite")
	plugin.Omit("memory.fts", "nosqlite")
}

// sessionsCompiledIn is what version says of session continuity.
const sessionsCompiledIn = "not compiled in (nosqlite)"
