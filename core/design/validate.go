package design

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/openstarry/openstarry-edge/core/tool"
)

// MaxTemplateBytes is the largest template accepted from a file, the cache or
// the design layer.
const MaxTemplateBytes = 1 << 20

// BuiltinTools returns the tool names the zero Validator accepts: those of
// the tool registry (core/tool) of this process, sorted. The registry is the
// one list: a tool registers itself from its own package (the file and
// memory tools from core/tool, http_get from transport/httpget, the
// daemon's tools from core/daemon/agenttool), and the binary links them all.
func BuiltinTools() []string { return tool.Names() }

// Validator checks templates against template.schema.json and the rules a
// schema cannot state. The zero Validator accepts the built-in tools. A
// Validator is a value and safe for concurrent use.
type Validator struct {
	// KnownTool reports whether the tool registry has a tool of this name.
	// Nil asks the tool registry (tool.Known), as BuiltinTools lists it.
	KnownTool func(name string) (ok bool)
	// ToolDefinition returns a tool's definition as a model is offered it,
	// for the bounds of ModelToolProblems. Nil checks only the number of
	// tools.
	ToolDefinition func(name string) (ModelTool, bool)
}

func (v Validator) knownTool(name string) bool {
	if v.KnownTool != nil {
		return v.KnownTool(name)
	}
	return tool.Known(name)
}

// Validate checks one template on its own: JSON syntax, the schema, known
// tools and role rules. It does not check the rules that need a set (workers
// exist, unique names) or a file name; Load and LoadDir do. file names the
// template in errors. The error, when not nil, is a ValidationErrors.
func (v Validator) Validate(file string, data []byte) (*Template, error) {
	t, errs := v.check(file, data)
	sortErrors(errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return t, nil
}

// CheckTemplate validates a template built in Go by encoding it and running
// Validate on the result; label names it in errors.
func (v Validator) CheckTemplate(label string, t *Template) error {
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidTemplate, label, err)
	}
	_, err = v.Validate(label, data)
	return err
}

// check runs every single-template rule and returns the decoded template
// only when there is no error. Errors are not sorted.
func (v Validator) check(file string, data []byte) (*Template, ValidationErrors) {
	if len(data) > MaxTemplateBytes {
		return nil, ValidationErrors{{File: file, Rule: RuleSize,
			Message: fmt.Sprintf("%d bytes, larger than the %d byte limit", len(data), MaxTemplateBytes)}}
	}
	doc, err := parseJSON(data)
	if err != nil {
		return nil, ValidationErrors{{File: file, Rule: RuleSyntax, Message: err.Error()}}
	}
	sch, err := compiledSchema()
	if err != nil {
		// The embedded schema is part of the build; TestSchemaCompiles
		// keeps this unreachable.
		return nil, ValidationErrors{{File: file, Rule: "schema", Message: err.Error()}}
	}
	errs := schemaCheck(sch, file, doc)
	errs = append(errs, v.goRules(file, doc)...)
	if len(errs) > 0 {
		return nil, errs
	}
	// The schema passed, so the shape is right; what may still fail is a
	// number the schema calls an integer but Go cannot hold (1.0, 1e3).
	t, err := Decode(data)
	if err != nil {
		return nil, ValidationErrors{decodeError(file, err)}
	}
	return t, nil
}

// goRules checks what the schema cannot: tools against the registry and
// workers only on a master. It reads the generic document so that it also
// reports on templates the schema rejected for other reasons.
func (v Validator) goRules(file string, doc any) ValidationErrors {
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	var errs ValidationErrors
	if tools, ok := obj["tools"].([]any); ok {
		allow, _ := obj["http_allowlist"].([]any)
		for i, x := range tools {
			if x == "http_get" && len(allow) == 0 {
				errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/tools/%d", i), Rule: RuleNoAllowlist,
					Message: "http_get needs an http_allowlist naming the URL prefixes it may fetch"})
			}
			name, ok := x.(string)
			if !ok || name == "" || v.knownTool(name) {
				continue
			}
			errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/tools/%d", i), Rule: RuleUnknownTool,
				Message: fmt.Sprintf("tool %q is not in the tool registry", name)})
		}
	}
	if mem, _ := obj["memory"].(string); mem == "" {
		if tools, ok := obj["tools"].([]any); ok {
			for i, x := range tools {
				if name, _ := x.(string); strings.HasPrefix(name, "memory_") {
					errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/tools/%d", i), Rule: RuleNoMemory,
						Message: fmt.Sprintf("tool %q needs a memory engine: name one in \"memory\" (e.g. \"fts://\")", name)})
				}
			}
		}
	}
	if role, _ := obj["role"].(string); role == RoleMaster {
		if eph, _ := obj["ephemeral"].(bool); eph {
			errs = append(errs, ValidationError{File: file, Path: "/ephemeral", Rule: RuleEphemeralMaster,
				Message: "a master's state is never deleted automatically: only a worker can be ephemeral"})
		}
	}
	if servers, ok := obj["mcp_servers"].([]any); ok {
		seen := map[string]bool{}
		for i, x := range servers {
			srv, ok := x.(map[string]any)
			if !ok {
				continue
			}
			_, cmd := srv["command"]
			_, url := srv["url"]
			if cmd == url {
				errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/mcp_servers/%d", i), Rule: RuleMCPServer,
					Message: "an MCP server has exactly one of command and url"})
			}
			if _, env := srv["env"]; env && !cmd {
				errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/mcp_servers/%d/env", i), Rule: RuleMCPServer,
					Message: "env is for a command"})
			}
			if name, _ := srv["name"].(string); name != "" {
				if seen[name] {
					errs = append(errs, ValidationError{File: file, Path: fmt.Sprintf("/mcp_servers/%d/name", i), Rule: RuleMCPServer,
						Message: fmt.Sprintf("two MCP servers are named %q", name)})
				}
				seen[name] = true
			}
		}
	}
	errs = append(errs, v.modelToolRules(file, obj)...)
	if role, _ := obj["role"].(string); role == RoleWorker {
		if ws, ok := obj["workers"].([]any); ok && len(ws) > 0 {
			errs = append(errs, ValidationError{File: file, Path: "/workers", Rule: RuleWorkersOnWorker,
				Message: "only a master template names workers"})
		}
	}
	return errs
}

// parseJSON decodes data into the generic form the schema validator wants
// (numbers as json.Number), with errors that say where the syntax breaks.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, syntaxMessage(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		off := dec.InputOffset()
		line, col := position(data, off)
		return nil, fmt.Errorf("line %d, column %d: data after the template's closing brace", line, col)
	}
	return doc, nil
}

func syntaxMessage(data []byte, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		line, col := position(data, se.Offset)
		return fmt.Errorf("line %d, column %d: %v", line, col, se)
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) == 0:
		return errors.New("empty file")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(data, int64(len(data)))
		return fmt.Errorf("line %d, column %d: unexpected end of JSON input", line, col)
	default:
		return err
	}
}

// position converts a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	if col < 1 {
		col = 1
	}
	return line, col
}

// decodeError converts a strict-decode failure that the schema let through.
func decodeError(file string, err error) ValidationError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		p := ""
		if te.Field != "" {
			p = "/" + strings.ReplaceAll(te.Field, ".", "/")
		}
		return ValidationError{File: file, Path: p, Rule: RuleDecode,
			Message: fmt.Sprintf("got %s, want %s", te.Value, goTypeName(te.Type.Kind().String()))}
	}
	return ValidationError{File: file, Rule: RuleDecode, Message: strings.TrimPrefix(err.Error(), ErrInvalidTemplate.Error()+": ")}
}

func goTypeName(k string) string {
	if strings.HasPrefix(k, "int") {
		return "a 32-bit integer"
	}
	return k
}

// display shows a value in an enum error.
func display(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	default:
		return fmt.Sprint(v)
	}
}

// escapePointer escapes one RFC 6901 reference token.
func escapePointer(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
}

// sortErrors orders errors by file, then path, rule and message, so that
// output is stable whatever order the checks ran in.
func sortErrors(es ValidationErrors) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Message < b.Message
	})
}
