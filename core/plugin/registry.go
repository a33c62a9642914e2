package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/memory"
)

// Kind is a plugin kind: the first part of a plugin ID.
type Kind string

// The plugin kinds.
const (
	KindStorage   Kind = "storage"   // snapshot stores, opened by URL scheme
	KindTransport Kind = "transport" // task transports
	KindInfra     Kind = "infra"     // infrastructure started by the daemon (the embedded broker)
	KindBrain     Kind = "brain"     // model providers
	KindTool      Kind = "tool"      // tools the brain can call
	KindMemory    Kind = "memory"    // long-term memory engines, opened by URL scheme
	KindListener  Kind = "listener"  // event sources an agent starts after hydration (webhooks)
)

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

// Info describes one plugin. ID is "kind.name" ("storage.bbolt"); for a
// storage plugin the name is also its URL scheme.
type Info struct {
	ID          string
	Description string
	OpenStorage StorageOpener  // storage plugins only
	OpenMemory  MemoryOpener   // memory plugins only
	Listen      ListenerOpener // listener plugins only
	// NewBroker builds the embedded MQTT broker (infra.broker).
	NewBroker BrokerOpener
	// OpenTransport builds an agent's task transport (transport plugins).
	OpenTransport TransportOpener
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

var (
	mu       sync.RWMutex // guards registry and omitted
	registry = map[string]Info{}
	omitted  = map[string]string{} // plugin id → build tag that left it out
)

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
func Omit(id, tag string) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[id]; dup {
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

// Register adds a plugin. It is called from init and panics on an empty,
// malformed or duplicate ID, or a storage plugin without an opener: those are
// programming errors that must fail the build's tests, not a boot.
func Register(info Info) {
	kind, name, ok := strings.Cut(info.ID, ".")
	if !ok || kind == "" || name == "" {
		panic(fmt.Sprintf("plugin: malformed id %q (want kind.name)", info.ID))
	}
	switch Kind(kind) {
	case KindStorage:
		if info.OpenStorage == nil {
			panic(fmt.Sprintf("plugin: storage plugin %q has no OpenStorage", info.ID))
		}
	case KindMemory:
		if info.OpenMemory == nil {
			panic(fmt.Sprintf("plugin: memory plugin %q has no OpenMemory", info.ID))
		}
	case KindListener:
		if info.Listen == nil {
			panic(fmt.Sprintf("plugin: listener plugin %q has no Listen", info.ID))
		}
	case KindTransport, KindInfra, KindBrain, KindTool:
	default:
		panic(fmt.Sprintf("plugin: %q has unknown kind %q", info.ID, kind))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[info.ID]; dup {
		panic(fmt.Sprintf("plugin: %q registered twice", info.ID))
	}
	if _, out := omitted[info.ID]; out {
		panic(fmt.Sprintf("plugin: %q both registered and omitted", info.ID))
	}
	registry[info.ID] = info
}

// Lookup returns the plugin registered under id.
func Lookup(id string) (Info, bool) {
	mu.RLock()
	defer mu.RUnlock()
	info, ok := registry[id]
	return info, ok
}

// List returns the registered plugins of a kind, sorted by ID.
func List(kind Kind) []Info {
	mu.RLock()
	defer mu.RUnlock()
	var out []Info
	for _, info := range registry {
		if info.Kind() == kind {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

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
	return info.OpenStorage(ctx, u, env)
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
	return info.OpenMemory(ctx, u, env)
}

func storageSchemes() string { return schemes(KindStorage) }

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
