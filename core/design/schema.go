package design

import (
	"bytes"
	_ "embed"
	"sync"
)

// schemaJSON is template.schema.json, the JSON Schema (draft 2020-12) every
// template must satisfy. It is the single source of the format: the Go rules
// in validate.go add only what a schema cannot say. schemacheck.go checks
// templates against it.
//
//go:embed template.schema.json
var schemaJSON []byte

// schemaID is the $id of template.schema.json.
const schemaID = "https://github.com/openstarry/openstarry-edge/core/design/template.schema.json"

// Schema returns a copy of the template JSON Schema, for editors and for
// `openstarry templates schema`.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// compiledSchema loads the embedded schema the first time a template is
// checked, not when the program starts. The result is immutable and safe for
// concurrent use; a failure is a build defect that TestSchemaCompiles
// catches.
var compiledSchema = sync.OnceValues(func() (*schemaNode, error) {
	return loadSchema(schemaJSON)
})
