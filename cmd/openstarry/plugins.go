package main

// The concrete plugins of this binary. Nothing else in the tree names them:
// the agent process (core/host) finds its MQTT transport, and the transport
// its embedded broker, through the registry.
// bbolt, the default store, is always in; each other store has a build tag
// that leaves it out of a smaller binary (plugins_*.go):
//
//	go build -tags nosqlite,noredis,nofile ./cmd/openstarry   # bbolt only
//
// A store URL for a store left out is refused with an error naming the tag.
import (
	"github.com/openstarry/openstarry-edge/core/daemon"

	_ "github.com/openstarry/openstarry-edge/core/daemon/agenttool"
	_ "github.com/openstarry/openstarry-edge/storage/bbolt"
	_ "github.com/openstarry/openstarry-edge/storage/memory/qdrant"
	_ "github.com/openstarry/openstarry-edge/transport/broker"
	_ "github.com/openstarry/openstarry-edge/transport/fleet" // fleet claims: without them an agent taking fleet tasks does not start
	_ "github.com/openstarry/openstarry-edge/transport/httpget"
	_ "github.com/openstarry/openstarry-edge/transport/llm"
	_ "github.com/openstarry/openstarry-edge/transport/mqtt"
	_ "github.com/openstarry/openstarry-edge/transport/webhook"
)

// daemonSessions hands the daemon session continuity: the plugin
// sessions.daemon (transport/sessionapi) over the store sessionstore.sqlite
// (storage/sessionsql), both blank imports of plugins_sqlite.go, or why
// there is none (a build with -tags nosqlite: plugins_nosqlite.go).
func daemonSessions() daemon.Sessions {
	link, missing := daemon.LookupSessions("sqlite")
	return daemon.Sessions{Link: link, Missing: missing}
}
