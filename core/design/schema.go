package design

import (
	"bytes"
	_ "embed"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaJSON is template.schema.json, the JSON Schema (draft 2020-12) every
// template must satisfy. It is the single source of the format: the Go rules
// in validate.go add only what a schema cannot say.
//
//go:embed template.schema.json
var schemaJSON []byte

// schemaID is the $id of template.schema.json.
const schemaID = "https://github.com/openstarry/openstarry-edge/core/design/template.schema.json"

// Schema returns a copy of the template JSON Schema, for editors and for
// `openstarry templates schema`.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// compiledSchema compiles the embedded schema once. The result is immutable
// and safe for concurrent use; a failure is a build defect and panics in
// tests (TestSchemaCompiles).
var compiledSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("design: parse template.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaID, doc); err != nil {
		return nil, fmt.Errorf("design: add template.schema.json: %w", err)
	}
	s, err := c.Compile(schemaID)
	if err != nil {
		return nil, fmt.Errorf("design: compile template.schema.json: %w", err)
	}
	return s, nil
})
