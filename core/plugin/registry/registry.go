// Package registry is the one registry of OpenStarry's plugins, in Caddy's
// manner: every plugin (a snapshot store, a session store, a brain, a tool,
// the MCP client, infrastructure, a transport, a listener, fleet claims) is
// an Info with an ID "kind.name" and New, its constructor, registered from
// its package's init; typed lookups over Lookup assert New's type. The
// package that uses a kind declares it (DeclareKind) with the type its
// plugins' New must have, so that a wrong registration fails the tests.
//
// core/plugin is its face (plugin.Register, plugin.Lookup, ...) and
// declares the kinds it owns; the map lives here, below every package that
// has a kind, because some of them (core/tool) are imported by what
// core/plugin imports (core/design). Nothing else keeps a registry of its
// own: cmd/openstarry's dependency test enforces it.
package registry

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// Kind is a plugin kind: the first part of a plugin ID.
type Kind string

// The plugin kinds, each with the type of its plugins' New and the package
// that declares it (DeclareKind).
const (
	KindStorage      Kind = "storage"      // snapshot stores, by URL scheme: plugin.StorageOpener (core/plugin)
	KindMemory       Kind = "memory"       // long-term memory engines, by URL scheme: plugin.MemoryOpener (core/plugin)
	KindListener     Kind = "listener"     // event sources an agent starts after hydration: plugin.ListenerOpener (core/plugin)
	KindInfra        Kind = "infra"        // infrastructure the daemon starts (the embedded broker): plugin.BrokerOpener (core/plugin)
	KindTransport    Kind = "transport"    // task transports: plugin.TransportOpener (core/plugin)
	KindSessionStore Kind = "sessionstore" // session continuity's store (sessions.db): session.StoreOpener (core/session)
	KindSessions     Kind = "sessions"     // session continuity as the daemon runs it: daemon.SessionsOpener (core/daemon)
	KindBrain        Kind = "brain"        // model providers: brain.Factory (core/brain)
	KindTool         Kind = "tool"         // tools the brain can call: tool.Tool (core/tool)
	KindMCP          Kind = "mcp"          // the client of Model Context Protocol servers' tools: host.ToolSource (core/host)
	KindClaims       Kind = "claims"       // fleet task claims of the MQTT transport: mqtt.ClaimsFactory (transport/mqtt)
)

// KindSessionBackup: session continuity's JSON backup (DATA/projects):
// session.BackupOpener (core/session).
const KindSessionBackup Kind = "sessionbackup"

// Info describes one plugin. ID is "kind.name"; New is the plugin's
// constructor (or, for a tool, the tool itself), of the type its kind was
// declared with.
type Info struct {
	ID          string
	Description string
	New         any
}

// Kind returns the kind part of the ID.
func (i Info) Kind() Kind {
	k, _, _ := strings.Cut(i.ID, ".")
	return Kind(k)
}

// Name returns the part of the ID after the kind.
func (i Info) Name() string {
	_, n, _ := strings.Cut(i.ID, ".")
	return n
}

// kind is a declared kind: the type name its New must have, and the check.
type kind struct {
	want string
	fits func(any) bool
}

var (
	mu      sync.RWMutex // guards the maps
	kinds   = map[Kind]kind{}
	plugins = map[string]Info{}
	omitted = map[string]string{} // plugin id → build tag that left it out
)

// DeclareKind declares a kind whose plugins' New is of the type named want
// (for messages) and passes fits. It is called once per kind, from the
// package that uses it, before any plugin of the kind registers (a
// package-level variable of that package: its importers' init run after
// it). It panics on a second declaration.
func DeclareKind(k Kind, want string, fits func(any) bool) bool {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := kinds[k]; dup || k == "" || strings.Contains(string(k), ".") || fits == nil {
		panic(fmt.Sprintf("plugin: kind %q declared twice or malformed", k))
	}
	kinds[k] = kind{want: want, fits: fits}
	return true
}

// Is reports whether v is a T: the check of DeclareKind for a kind whose
// New is a T.
func Is[T any](v any) bool { _, ok := v.(T); return ok }

// Register adds a plugin. It is called from init and panics on an empty,
// malformed or duplicate ID, a kind nobody declared, a nil New or one not of
// the kind's type, or an ID also omitted: those are programming errors that
// must fail the build's tests, not a boot.
func Register(info Info) {
	k, name, ok := strings.Cut(info.ID, ".")
	if !ok || k == "" || name == "" {
		panic(fmt.Sprintf("plugin: malformed id %q (want kind.name)", info.ID))
	}
	mu.Lock()
	defer mu.Unlock()
	decl, known := kinds[Kind(k)]
	if !known {
		panic(fmt.Sprintf("plugin: %q has unknown kind %q", info.ID, k))
	}
	if isNil(info.New) || !decl.fits(info.New) {
		panic(fmt.Sprintf("plugin: %q has no New of its kind's type %s (got %T)", info.ID, decl.want, info.New))
	}
	if _, dup := plugins[info.ID]; dup {
		panic(fmt.Sprintf("plugin: %q registered twice", info.ID))
	}
	if _, out := omitted[info.ID]; out {
		panic(fmt.Sprintf("plugin: %q both registered and omitted", info.ID))
	}
	plugins[info.ID] = info
}

// isNil reports whether v is nil or a nil func, map, pointer, ...
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Func, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Chan:
		return r.IsNil()
	}
	return false
}

// Omit records that this build leaves out the plugin id because of the
// build tag tag, so that asking for it gets an error naming the build. It
// panics when id is also registered.
func Omit(id, tag string) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := plugins[id]; dup {
		panic(fmt.Sprintf("plugin: %q both registered and omitted", id))
	}
	omitted[id] = tag
}

// Omitted returns the plugins this build left out, each with its build tag.
func Omitted() map[string]string {
	mu.RLock()
	defer mu.RUnlock()
	out := make(map[string]string, len(omitted))
	for id, tag := range omitted {
		out[id] = tag
	}
	return out
}

// Lookup returns the plugin registered under id.
func Lookup(id string) (Info, bool) {
	mu.RLock()
	defer mu.RUnlock()
	info, ok := plugins[id]
	return info, ok
}

// List returns the registered plugins of a kind, sorted by ID.
func List(k Kind) []Info {
	mu.RLock()
	defer mu.RUnlock()
	var out []Info
	for _, info := range plugins {
		if info.Kind() == k {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Without takes the plugin id out of the registry until restore is called:
// for a test that runs as a binary without it (transport/mqtt's, as one
// without transport/fleet). Not for production code.
func Without(id string) (restore func()) {
	mu.Lock()
	saved, had := plugins[id]
	delete(plugins, id)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(plugins, id)
		if had {
			plugins[id] = saved
		}
	}
}
