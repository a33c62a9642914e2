//go:build !nosqlite

package main

import (
	_ "github.com/openstarry/openstarry-edge/storage/memory/fts"
	_ "github.com/openstarry/openstarry-edge/storage/sessionfiles" // its JSON backup (DATA/projects)
	_ "github.com/openstarry/openstarry-edge/storage/sessionsql"   // session continuity's store (sessions.db)
	_ "github.com/openstarry/openstarry-edge/storage/sqlite"
	_ "github.com/openstarry/openstarry-edge/transport/sessionapi" // session continuity in the daemon, and its API
)

// sessionsCompiledIn is what version says of session continuity.
const sessionsCompiledIn = "yes (DATA/sessions.db)"
