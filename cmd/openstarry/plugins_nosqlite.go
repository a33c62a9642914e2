//go:build nosqlite

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

// Without SQLite: no sqlite:// store, no fts:// memory engine (an FTS5
// index in a SQLite file) and no session continuity (its store,
// sessions.db, is a SQLite file): the daemon is handed none and says so
// (the wiring's daemonSessions), and the commands say so too
// (sessions_nosqlite.go: without it, the CLI's session client would link
// core/session into the small build, over its size budget).
func init() {
	plugin.Omit("storage.sqlite", "nosqlite")
	plugin.Omit("memory.fts", "nosqlite")
	plugin.Omit("sessionstore.sqlite", "nosqlite")
	plugin.Omit("sessionbackup.files", "nosqlite")
	plugin.Omit("sessions.daemon", "nosqlite")
}

// sessionsCompiledIn is what version says of session continuity.
const sessionsCompiledIn = "not compiled in (nosqlite)"
