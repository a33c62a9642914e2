package backend

import (
	"sync"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Agents is a store's state per agent id, guarded by its own mutex, that
// every call refuses with plugin.ErrClosed once Close was called. What the
// state is (a cache entry, a file handle, a lock) is the store's business;
// Agents only keeps the map and the closed flag consistent. The zero value is
// an empty, open map. Agents must not be copied after first use.
type Agents[T any] struct {
	mu     sync.Mutex
	closed bool
	m      map[string]*T
}

// Get returns the state of id, nil when there is none, or plugin.ErrClosed.
func (a *Agents[T]) Get(id string) (*T, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, plugin.ErrClosed
	}
	return a.m[id], nil
}

// GetOrAdd returns the state of id, adding the one newState makes for id
// when there is none, or plugin.ErrClosed. newState runs under the mutex.
func (a *Agents[T]) GetOrAdd(id string, newState func(id string) *T) (*T, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, plugin.ErrClosed
	}
	st := a.m[id]
	if st == nil {
		st = newState(id)
		if a.m == nil {
			a.m = map[string]*T{}
		}
		a.m[id] = st
	}
	return st, nil
}

// Set makes st the state of id; a nil st forgets id. After Close it does
// nothing.
func (a *Agents[T]) Set(id string, st *T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if st == nil {
		delete(a.m, id)
		return
	}
	if a.m == nil {
		a.m = map[string]*T{}
	}
	a.m[id] = st
}

// Closed reports whether Close was called.
func (a *Agents[T]) Closed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Close marks the map closed and empties it. The first call returns the
// states it held and true, for the store to release them; later calls
// return nil and false.
func (a *Agents[T]) Close() (map[string]*T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, false
	}
	a.closed = true
	m := a.m
	a.m = nil
	return m, true
}
