//go:build !nosqlite

package main

import (
	_ "github.com/openstarry/openstarry-edge/storage/memory/fts"
	_ "github.com/openstarry/openstarry-edge/storage/sessionsql" // session continuity's store (sessions.db)
	_ "github.com/openstarry/openstarry-edge/storage/sqlite"
)

// sessionsCompiledIn is what version says of session continuity.
const sessionsCompiledIn = "yes (DATA/sessions.db)"
