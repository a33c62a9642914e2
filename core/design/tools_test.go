package design

// The zero Validator asks the tool registry of the process (BuiltinTools);
// these tests link the packages that register the tools living outside
// core/tool, as the binary does, so that the shipped templates validate.
import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/openstarry/openstarry-edge/core/tool"

	_ "github.com/openstarry/openstarry-edge/core/daemon/agenttool"
	_ "github.com/openstarry/openstarry-edge/transport/httpget"
)

// TestZeroValidatorAsksRegistry: the zero Validator has no list of its
// own; a tool registered anywhere in the process is known to it, and
// BuiltinTools is the registry's list (it once missed task_update).
func TestZeroValidatorAsksRegistry(t *testing.T) {
	const name = "registered_by_design_test"
	data := tmpl(t, "a", "worker", func(m map[string]any) { m["tools"] = []any{"sleep_ms", name} })
	if _, err := (Validator{}).Validate("a.json", data); err == nil {
		t.Fatalf("%s accepted before it was registered", name)
	}
	tool.Register(tool.Tool{Name: name, Run: func(context.Context, tool.Env, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if _, err := (Validator{}).Validate("a.json", data); err != nil {
		t.Fatalf("a registered tool is refused by the zero Validator: %v", err)
	}
	if got, want := BuiltinTools(), tool.Names(); !slices.Equal(got, want) {
		t.Errorf("BuiltinTools() = %v, the registry has %v", got, want)
	}
	for _, n := range []string{"task_update", "approach_record", "http_get", "memory_search"} {
		if !slices.Contains(BuiltinTools(), n) {
			t.Errorf("BuiltinTools() lacks %s: %v", n, BuiltinTools())
		}
	}
}
