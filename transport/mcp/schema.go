package mcp

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxRepeat is the largest minLength, maxLength, minItems or maxItems an
// MCP tool's schema keeps. llama-server turns these bounds into grammar
// repetitions and refuses the whole request ("failed to parse grammar")
// from about 2,000 (measured: minLength 2000 and minItems 5000 refused,
// 1000 and 2000 accepted); 256 leaves room for several in one schema.
const maxRepeat = 256

// normalizeSchema returns an MCP tool's input schema without the keywords
// that make grammar-driven model servers (llama.cpp's llama-server, which
// turns every tool's schema into a grammar) refuse every request that
// offers the tool: a $ref that is not a pointer into the schema itself
// ("other.json#/x", "urn:…"), or one that points at nothing (both answered
// 400 "JSON schema conversion failed"), and length or item bounds over
// maxRepeat. It also returns what it dropped, one entry each with its place,
// for the log line. The MCP server still checks the arguments it receives.
func normalizeSchema(raw json.RawMessage) (json.RawMessage, []string) {
	if len(raw) == 0 {
		return raw, nil
	}
	var root any
	if err := json.Unmarshal(raw, &root); err != nil {
		return raw, nil
	}
	var dropped []string
	var walk func(node any, at string)
	schemaMap := func(v any, at string) {
		if m, ok := v.(map[string]any); ok {
			for _, k := range sortedKeys(m) {
				walk(m[k], at+"/"+k)
			}
		}
	}
	walk = func(node any, at string) {
		switch n := node.(type) {
		case []any:
			for i, v := range n {
				walk(v, at+"/"+strconv.Itoa(i))
			}
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				if !strings.HasPrefix(ref, "#") || !resolves(root, ref) {
					delete(n, "$ref")
					dropped = append(dropped, fmt.Sprintf("$ref %q at %s", ref, at+"/$ref"))
				}
			}
			for _, k := range []string{"minLength", "maxLength", "minItems", "maxItems"} {
				if v, ok := n[k].(float64); ok && v > maxRepeat {
					delete(n, k)
					dropped = append(dropped, fmt.Sprintf("%s %v at %s", k, v, at+"/"+k))
				}
			}
			for _, k := range sortedKeys(n) {
				switch k {
				case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
					schemaMap(n[k], at+"/"+k)
				case "enum", "const", "default", "examples", "required", "dependentRequired":
					// data, not schemas
				default:
					walk(n[k], at+"/"+k)
				}
			}
		}
	}
	// Again while something goes: a $ref may point at one just dropped.
	for n := -1; n != len(dropped); {
		n = len(dropped)
		walk(root, "")
	}
	if len(dropped) == 0 {
		return raw, nil
	}
	out, err := json.Marshal(root)
	if err != nil {
		return raw, nil
	}
	return out, dropped
}

// resolves reports whether ref, "#" or "#/a/b", names a value inside root.
func resolves(root any, ref string) bool {
	p := strings.TrimPrefix(ref, "#")
	if p == "" {
		return true
	}
	if !strings.HasPrefix(p, "/") {
		return false // "#name" anchors: not supported by llama.cpp either
	}
	cur := root
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return false
			}
			cur = c[i]
		default:
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
