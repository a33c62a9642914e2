// Package brain owns the registry of brain providers and the built-in echo
// brain. A provider turns a template's brain section into an agent.Brain;
// model servers register from transport/llm.
package brain

import (
	"fmt"
	"sort"
	"sync"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
)

// Factory builds a brain from a template's brain section.
type Factory func(cfg design.Brain) (agent.Brain, error)

var (
	mu        sync.RWMutex // guards factories
	factories = map[string]Factory{}
)

// Register adds a provider; it panics on a duplicate name.
func Register(provider string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[provider]; dup {
		panic(fmt.Sprintf("brain: provider %q registered twice", provider))
	}
	factories[provider] = f
}

// New builds the brain a template asks for.
func New(cfg design.Brain) (agent.Brain, error) {
	mu.RLock()
	f, ok := factories[cfg.Provider]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("brain: unknown provider %q (built in: %v)", cfg.Provider, Providers())
	}
	return f(cfg)
}

// Providers lists the registered provider names.
func Providers() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for n := range factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
