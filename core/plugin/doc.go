// Package plugin owns the plugin kinds of OpenStarry, the interfaces each kind
// implements, the sentinel errors they return, and the one registry through
// which concrete plugins are found (Register, Lookup, List; its map lives in
// core/plugin/registry, which the packages owning other kinds, core/tool
// among them, import without an import cycle). A plugin is an Info: an ID
// "kind.name" and New, its constructor, of the kind's type; a missing piece
// is an error where it is asked for, never a silent default.
//
// Plugins register themselves from init (like database/sql drivers or Caddy
// modules); only cmd/openstarry knows the concrete set, through blank imports.
// Nothing under core/ imports a concrete backend. New must have no side
// effects: a plugin does I/O only when it is opened with a URL. The embedded
// broker (NewBroker) and a task transport (OpenTransport) only check their
// configuration and read the files it names; they start in Start.
package plugin
