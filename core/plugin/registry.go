package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// Kind is a plugin kind: the first part of a plugin ID.
type Kind = registry.Kind

// The plugin kinds (registry lists each with its New's type).
const (
	KindStorage      = registry.KindStorage
	KindTransport    = registry.KindTransport
	KindInfra        = registry.KindInfra
	KindBrain        = registry.KindBrain
	KindTool         = registry.KindTool
	KindMemory       = registry.KindMemory
	KindListener     = registry.KindListener
	KindMCP          = registry.KindMCP
	KindClaims       = registry.KindClaims
	KindSessionStore = registry.KindSessionStore
	KindSessions     = registry.KindSessions
)

// kindsDeclared declares the kinds this package owns, with the type of
// their plugins' New, before any plugin's init runs.
var kindsDeclared = registry.DeclareKind(KindStorage, "plugin.StorageOpener", registry.Is[StorageOpener]) &&
	registry.DeclareKind(KindMemory, "plugin.MemoryOpener", registry.Is[MemoryOpener]) &&
	registry.DeclareKind(KindListener, "plugin.ListenerOpener", registry.Is[ListenerOpener]) &&
	registry.DeclareKind(KindInfra, "plugin.BrokerOpener", registry.Is[BrokerOpener]) &&
	registry.DeclareKind(KindTransport, "plugin.TransportOpener", registry.Is[TransportOpener])

// Env is what the host hands a plugin when it opens one: where the data
// directory is and where to log.
type Env struct {
	DataDir string
	Log     zerolog.Logger
}

// StorageOpener opens a Storage from its URL (the scheme already matched).
type StorageOpener func(ctx context.Context, u *url.URL, env Env) (Storage, error)

// MemoryOpener opens a memory engine from its URL (the scheme already matched).
type MemoryOpener func(ctx context.Context, u *url.URL, env Env) (memory.Engine, error)

// Info describes one plugin, in Caddy's manner: an ID "kind.name"
// ("storage.bbolt": for a store or memory engine the name is also its URL
// scheme) and New, the plugin's constructor, whose type is its kind's
// (registry's list of kinds says which). Typed lookups (OpenStorage,
// tool.Lookup, session.LookupStore, ...) assert it.
type Info = registry.Info

// ErrNotCompiledIn is wrapped by the error of a plugin this build left out
// with a build tag (a store URL whose backend a small build does not have).
var ErrNotCompiledIn = errors.New("not compiled into this build")

// NotCompiledIn returns the error of a feature this build left out with the
// build tag tag, for every entry point to it: "session continuity is not
// compiled into this build (built with -tags nosqlite); use the standard
// build, which has it". It wraps ErrNotCompiledIn.
func NotCompiledIn(feature, tag string) error {
	return fmt.Errorf("%s is %w (built with -tags %s); use the standard build, which has it", feature, ErrNotCompiledIn, tag)
}

// Omit records that this build leaves out the plugin id because of the
// build tag tag ("nosqlite"), so that asking for it gets an error naming
// the build rather than "unknown scheme". It is called from init, in the
// file that the tag selects, and panics when id is also registered.
func Omit(id, tag string) { registry.Omit(id, tag) }

// Omitted returns the plugins this build left out, each with its build tag.
func Omitted() map[string]string { return registry.Omitted() }

// Register adds a plugin to the one registry: stores, session stores,
// brains, tools, the MCP client, infrastructure, transports, listeners and
// fleet claims all register here (core/tool, core/brain, core/session,
// core/host and transport/mqtt have typed wrappers over it). It is called
// from init and panics on an empty, malformed or duplicate ID, an unknown
// kind, or a New missing or not of the kind's type: those are programming
// errors that must fail the build's tests, not a boot.
func Register(info Info) { registry.Register(info) }

// DeclareKind declares a kind owned by a package above this one (its New
// must be of the type named want and pass fits): registry.DeclareKind.
func DeclareKind(k Kind, want string, fits func(any) bool) bool {
	return registry.DeclareKind(k, want, fits)
}

// Is reports whether v is a T, the check of a kind whose New is a T.
func Is[T any](v any) bool { return registry.Is[T](v) }

// Lookup returns the plugin registered under id.
func Lookup(id string) (Info, bool) { return registry.Lookup(id) }

// List returns the registered plugins of a kind, sorted by ID.
func List(kind Kind) []Info { return registry.List(kind) }

// Without takes the plugin id out of the registry until restore is called,
// for a test that runs as a binary without it. Not for production code.
func Without(id string) (restore func()) { return registry.Without(id) }

// OpenStorage opens the store named by rawURL ("bbolt:///var/lib/openstarry/agents",
// "sqlite:///path/state.db", ...) with the plugin registered for its scheme.
func OpenStorage(ctx context.Context, rawURL string, env Env) (Storage, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store url %q: %w", rawURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("store url %q has no scheme (want one of %s)", rawURL, storageSchemes())
	}
	id := string(KindStorage) + "." + u.Scheme
	info, ok := Lookup(id)
	if !ok {
		if tag, out := Omitted()[id]; out {
			return nil, fmt.Errorf("store url %q: the %s store is %w (built with -tags %s; built in: %s); use the standard build, which has every store",
				rawURL, u.Scheme, ErrNotCompiledIn, tag, storageSchemes())
		}
		return nil, fmt.Errorf("store url %q: no storage plugin for scheme %q (built in: %s)",
			rawURL, u.Scheme, storageSchemes())
	}
	return info.New.(StorageOpener)(ctx, u, env)
}

// OpenMemory opens the memory engine named by rawURL ("fts://",
// "qdrant://127.0.0.1:6333/notes") with the plugin registered for its scheme.
func OpenMemory(ctx context.Context, rawURL string, env Env) (memory.Engine, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("memory url %q: %w", rawURL, err)
	}
	id := string(KindMemory) + "." + u.Scheme
	info, ok := Lookup(id)
	if !ok {
		if tag, out := Omitted()[id]; out {
			return nil, fmt.Errorf("memory url %q: the %s memory engine is %w (built with -tags %s; built in: %s); use the standard build, which has every engine",
				rawURL, u.Scheme, ErrNotCompiledIn, tag, schemes(KindMemory))
		}
		return nil, fmt.Errorf("memory url %q: no memory plugin for scheme %q (built in: %s)",
			rawURL, u.Scheme, schemes(KindMemory))
	}
	return info.New.(MemoryOpener)(ctx, u, env)
}

func storageSchemes() string { return schemes(KindStorage) }

// Names returns the names of the registered plugins of kind, sorted and
// joined by ", ", or "none".
func Names(kind Kind) string {
	var names []string
	for _, info := range List(kind) {
		names = append(names, info.Name())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func schemes(kind Kind) string {
	var names []string
	for _, info := range List(kind) {
		if kind == KindListener {
			names = append(names, info.Name())
			continue
		}
		names = append(names, info.Name()+"://")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// URLPath returns the filesystem path a file-based store URL names:
// "bbolt:///abs/dir" → "/abs/dir", "bbolt://rel/dir" → "rel/dir" (host and path
// joined, so relative paths work), and "" for "bbolt://".
func URLPath(u *url.URL) string {
	if u.Opaque != "" {
		return u.Opaque
	}
	return u.Host + u.Path
}
