// Package storagetest is the conformance suite every storage backend runs.
//
// A backend's test calls Run with a Harness; the suite drives it through real
// files (or a real server) in t.TempDir and checks the promises of
// plugin.Storage: durable round trips, overwrite, delete, missing agents,
// concurrent agents, large histories, corruption detected and answered with
// the last good generation or ErrCorrupt, and cancelled contexts.
package storagetest

import (
	"testing"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Harness adapts one backend to the suite.
type Harness struct {
	// Open opens the backend rooted at dir. Calling it again with the same
	// dir after Close must see what was saved before (a restart).
	Open func(t *testing.T, dir string) plugin.Storage

	// CorruptLatest damages the newest stored generation of agentID (flips
	// bytes inside its record) while the store is closed. Load must then
	// return the previous generation. Nil for a backend that keeps no
	// previous generation.
	CorruptLatest func(t *testing.T, dir, agentID string)

	// CorruptAll damages every stored generation of agentID while the store
	// is closed. Load must then fail with an error wrapping ErrCorrupt.
	CorruptAll func(t *testing.T, dir, agentID string)
}

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Fatal("storagetest: suite not written yet")
}
