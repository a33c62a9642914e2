package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// schemas caches the compiled Parameters of every tool checked so far, by
// the schema's text: *jsonschema.Schema, or the error compiling it.
var schemas sync.Map

// CheckArgs checks a call's arguments against the tool's Parameters (JSON
// Schema, draft 2020-12) before the tool runs, so that a model's wrong or
// missing field is refused with what was wrong instead of reaching the tool
// half-decoded (a missing "line" of file_append would append an empty
// line). The error names every broken rule with its place, as
// "bad arguments: /line: missing required field". A tool without
// Parameters, or whose schema does not compile (an MCP server's), is not
// checked here: its own decoding is.
func (t Tool) CheckArgs(raw json.RawMessage) error {
	if len(t.Parameters) == 0 {
		return nil
	}
	sch := compiled(t.Parameters)
	if sch == nil {
		return nil
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		trimmed = []byte("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil {
		return fmt.Errorf("bad arguments: %v", err)
	}
	if err := validate(sch, doc); err != nil {
		return fmt.Errorf("bad arguments: %w", err)
	}
	return nil
}

func compiled(params json.RawMessage) *jsonschema.Schema {
	key := string(params)
	if v, ok := schemas.Load(key); ok {
		s, _ := v.(*jsonschema.Schema)
		return s
	}
	var out any = errors.New("not compiled")
	func() {
		defer func() { _ = recover() }()
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
		if err != nil {
			out = err
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		const loc = "urn:openstarry:tool-parameters"
		if err := c.AddResource(loc, doc); err != nil {
			out = err
			return
		}
		s, err := c.Compile(loc)
		if err != nil {
			out = err
			return
		}
		out = s
	}()
	schemas.Store(key, out)
	s, _ := out.(*jsonschema.Schema)
	return s
}

// validate returns nil or one error listing each broken rule, at most 8.
func validate(sch *jsonschema.Schema, doc any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = nil // the validator's own failure is not the model's
		}
	}()
	verr := sch.Validate(doc)
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return verr
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			at := ""
			for _, tok := range e.InstanceLocation {
				at += "/" + tok
			}
			switch k := e.ErrorKind.(type) {
			case *kind.Required:
				for _, m := range k.Missing {
					msgs = append(msgs, at+"/"+m+": missing required field")
				}
			case *kind.AdditionalProperties:
				for _, p := range k.Properties {
					msgs = append(msgs, at+"/"+p+": unknown field")
				}
			default:
				if at == "" {
					at = "/"
				}
				msgs = append(msgs, at+": "+e.ErrorKind.LocalizedString(kind.English))
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(msgs) > 8 {
		msgs = append(msgs[:8], fmt.Sprintf("and %d more", len(msgs)-8))
	}
	return errors.New(strings.Join(msgs, "; "))
}
