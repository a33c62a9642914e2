// Package brain owns the plugin kind brain (providers, in the one registry
// of core/plugin) and the built-in echo brain. A provider turns a template's brain section into an agent.Brain;
// model servers register from transport/llm.
package brain

import (
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// Factory builds a brain from a template's brain section.
type Factory func(cfg design.Brain) (agent.Brain, error)

// brainKind declares the plugin kind brain: a Factory per provider.
var brainKind = registry.DeclareKind(registry.KindBrain, "brain.Factory", registry.Is[Factory])

// Register adds a provider to the one registry (plugin brain.{provider});
// it panics on a duplicate name.
func Register(provider string, f Factory) {
	if _, dup := registry.Lookup(string(registry.KindBrain) + "." + provider); dup {
		panic(fmt.Sprintf("brain: provider %q registered twice", provider))
	}
	registry.Register(registry.Info{ID: string(registry.KindBrain) + "." + provider, New: f})
}

// New builds the brain a template asks for.
func New(cfg design.Brain) (agent.Brain, error) {
	info, ok := registry.Lookup(string(registry.KindBrain) + "." + cfg.Provider)
	if !ok {
		return nil, fmt.Errorf("brain: unknown provider %q (built in: %v)", cfg.Provider, Providers())
	}
	return info.New.(Factory)(cfg)
}

// Providers lists the registered provider names.
func Providers() []string {
	var out []string
	for _, info := range registry.List(registry.KindBrain) {
		out = append(out, info.Name())
	}
	return out
}
