package design

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
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

// compiledSchema compiles the embedded schema with the JSON Schema library
// (github.com/santhosh-tekuri/jsonschema/v6) the first time a template is
// checked, never when the program starts: compiling it loads the library's
// meta-schemas (about 1.7 MB), which a process that validates nothing — an
// agent process the daemon starts (LoadFrozen) — never pays for. The
// library is built from third_party/jsonschema, whose meta-schemas are
// compiled on first use too. The result is immutable and safe for
// concurrent use; a failure is a build defect that TestSchemaCompiles
// catches.
var compiledSchema = sync.OnceValues(compileSchema)

// compileSchema compiles template.schema.json; the first call in a process
// also compiles the library's meta-schemas, against which it is checked.
func compileSchema() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("design: parse template.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaID, doc); err != nil {
		return nil, fmt.Errorf("design: template.schema.json: %w", err)
	}
	sch, err := c.Compile(schemaID)
	if err != nil {
		return nil, fmt.Errorf("design: template.schema.json: %w", err)
	}
	return sch, nil
}

// schemaCheck checks doc, the generic form parseJSON returns (numbers as
// json.Number), against sch and returns one error per broken rule,
// unsorted; file names the template in them. A panic of the library is
// reported as an error of rule "schema", never passed on.
func schemaCheck(sch *jsonschema.Schema, file string, doc any) (errs ValidationErrors) {
	defer func() {
		if p := recover(); p != nil {
			errs = ValidationErrors{{File: file, Rule: "schema", Message: fmt.Sprintf("the schema validator failed: %v", p)}}
		}
	}()
	err := sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return ValidationErrors{{File: file, Rule: "schema", Message: err.Error()}}
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			errs = append(errs, schemaErrors(file, e)...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return errs
}

// schemaErrors maps one leaf of the library's error tree to the package's
// ValidationErrors: the rule is the schema keyword broken; a missing or
// unknown member is reported at its own path, one error each; a false
// schema is "not_allowed"; enum, type, minimum and maximum get the
// package's wording, every other keyword the library's.
func schemaErrors(file string, e *jsonschema.ValidationError) ValidationErrors {
	var b strings.Builder
	for _, tok := range e.InstanceLocation {
		b.WriteString("/" + escapePointer(tok))
	}
	at := b.String()
	one := func(rule, msg string) ValidationErrors {
		return ValidationErrors{{File: file, Path: at, Rule: rule, Message: msg}}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		out := make(ValidationErrors, 0, len(k.Missing))
		for _, m := range k.Missing {
			out = append(out, ValidationError{File: file, Path: at + "/" + escapePointer(m), Rule: "required", Message: "missing required field"})
		}
		return out
	case *kind.AdditionalProperties:
		out := make(ValidationErrors, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, ValidationError{File: file, Path: at + "/" + escapePointer(p), Rule: "additionalProperties", Message: "unknown field"})
		}
		return out
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprintf("%q", fmt.Sprint(w))
		}
		return one("enum", fmt.Sprintf("got %s, want one of %s", display(k.Got), strings.Join(want, ", ")))
	case *kind.Type:
		return one("type", fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or ")))
	case *kind.Minimum:
		if k.Want.IsInt() && k.Want.Num().IsInt64() && k.Want.Num().Int64() == 1 {
			return one("minimum", fmt.Sprintf("must be a positive integer, got %s", k.Got.RatString()))
		}
		return one("minimum", fmt.Sprintf("must be at least %s, got %s", k.Want.RatString(), k.Got.RatString()))
	case *kind.Maximum:
		return one("maximum", fmt.Sprintf("must be at most %s, got %s", k.Want.RatString(), k.Got.RatString()))
	case *kind.FalseSchema:
		return one("not_allowed", "not allowed here")
	}
	rule := "schema"
	if kw := e.ErrorKind.KeywordPath(); len(kw) > 0 {
		rule = kw[0]
	}
	return one(rule, e.ErrorKind.LocalizedString(kind.English))
}
