package design

import (
	"encoding/json"
	"fmt"
)

// Bounds on the tools a template offers a model (brain provider openai).
// Every request carries every tool's definition, and grammar-driven servers
// (llama.cpp's llama-server) turn each schema into a grammar. Measured
// against llama-server (internal/llamaserver's tiny model,
// TestModelToolBoundsOnRealServer): a schema of 1,024 optional
// properties is refused outright ("failed to parse grammar"); 32 tools in
// 16 KiB of definitions are answered (in 7 to 14 s, one thread of a loaded
// 2-core machine), but already take about 17,000 tokens of its byte-level
// vocabulary, some 4,000 of a real model's: the whole context of a small
// model on a device. The time to read them grows faster than their size
// (64 tools in 24 KiB took 13 s, 128 in 48 KiB 64 s).
const (
	MaxModelTools       = 32       // tools offered to a model
	MaxModelToolBytes   = 16 << 10 // their definitions (name, description, schema) as sent
	MaxSchemaProperties = 256      // properties in one tool's schema, nested ones included
)

// ModelTool is one tool as a model is offered it.
type ModelTool struct {
	Name, Description string
	Parameters        json.RawMessage
}

// ModelToolProblems returns what is over the bounds above, one message
// each, with the index of the tool it is about (-1 for the whole set).
func ModelToolProblems(tools []ModelTool) (idx []int, msgs []string) {
	if len(tools) > MaxModelTools {
		idx = append(idx, -1)
		msgs = append(msgs, fmt.Sprintf("%d tools offered to a model: at most %d (every request carries every definition, "+
			"and a small model's context and a grammar-driven server's grammar do not hold more)", len(tools), MaxModelTools))
	}
	total := 0
	for i, t := range tools {
		def, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
		total += len(def)
		if n := countProperties(t.Parameters); n > MaxSchemaProperties {
			idx = append(idx, i)
			msgs = append(msgs, fmt.Sprintf("tool %q has %d properties in its schema: at most %d "+
				"(llama-server refuses a schema of about 1,000 with \"failed to parse grammar\")", t.Name, n, MaxSchemaProperties))
		}
	}
	if total > MaxModelToolBytes {
		idx = append(idx, -1)
		msgs = append(msgs, fmt.Sprintf("the tools' definitions take %d bytes: at most %d (about %d tokens in every request)",
			total, MaxModelToolBytes, MaxModelToolBytes/4))
	}
	return idx, msgs
}

// countProperties counts the members of every "properties" object in a
// schema, at any depth.
func countProperties(raw json.RawMessage) int {
	var doc any
	if len(raw) == 0 || json.Unmarshal(raw, &doc) != nil {
		return 0
	}
	var count func(v any) int
	count = func(v any) int {
		n := 0
		switch x := v.(type) {
		case map[string]any:
			if p, ok := x["properties"].(map[string]any); ok {
				n += len(p)
			}
			for _, c := range x {
				n += count(c)
			}
		case []any:
			for _, c := range x {
				n += count(c)
			}
		}
		return n
	}
	return count(doc)
}

// modelToolRules applies ModelToolProblems to a template whose brain is
// openai, with the definitions v.ToolDefinition gives (the count alone
// without it).
func (v Validator) modelToolRules(file string, obj map[string]any) ValidationErrors {
	brain, _ := obj["brain"].(map[string]any)
	if p, _ := brain["provider"].(string); p != "openai" {
		return nil
	}
	list, _ := obj["tools"].([]any)
	tools := make([]ModelTool, 0, len(list))
	for _, x := range list {
		name, _ := x.(string)
		t := ModelTool{Name: name}
		if v.ToolDefinition != nil {
			if d, ok := v.ToolDefinition(name); ok {
				t = d
			}
		}
		tools = append(tools, t)
	}
	idx, msgs := ModelToolProblems(tools)
	var errs ValidationErrors
	for i, m := range msgs {
		path := "/tools"
		if idx[i] >= 0 {
			path = fmt.Sprintf("/tools/%d", idx[i])
		}
		errs = append(errs, ValidationError{File: file, Path: path, Rule: RuleModelTools, Message: m})
	}
	return errs
}
