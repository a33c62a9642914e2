package main

import (
	"testing"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/tool"
)

// templates validate sees every registered tool's definition, so that the
// model_tools bounds count their schemas; every registered tool together
// stays within them.
func TestTemplateValidatorToolDefinitions(t *testing.T) {
	v := templateValidator()
	var all []design.ModelTool
	for _, name := range tool.Names() {
		d, ok := v.ToolDefinition(name)
		if !ok || d.Name != name || d.Description == "" {
			t.Fatalf("tool %s: definition %+v, %v", name, d, ok)
		}
		all = append(all, d)
	}
	if _, ok := v.ToolDefinition("no_such_tool"); ok {
		t.Fatal("a definition for an unknown tool")
	}
	if _, msgs := design.ModelToolProblems(all); len(msgs) > 0 {
		t.Fatalf("the %d registered tools together: %q", len(all), msgs)
	}
}
