package design

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeTemplate feeds arbitrary bytes to Decode and Validate. Neither
// may panic; a template Validate accepts must decode, and a decoded template
// must survive an encode/decode round trip unchanged. The seed corpus (the
// shipped templates and every broken fixture) runs in every go test.
func FuzzDecodeTemplate(f *testing.F) {
	addTemplateSeeds(f)
	f.Add([]byte(`{"name":"a","version":"1.0.0","role":"worker","brain":{"provider":"echo"},"system_prompt":"","tools":[],"context_budget":{"max_messages":1e0}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))

	f.Fuzz(func(t *testing.T, data []byte) {
		vt, verr := Validator{}.Validate("f.json", data)
		dt, derr := Decode(data)
		if verr == nil {
			if derr != nil {
				t.Fatalf("Validate accepted what Decode refuses: %v", derr)
			}
			if !reflect.DeepEqual(vt, dt) {
				t.Fatalf("Validate and Decode disagree: %+v vs %+v", vt, dt)
			}
		}
		if derr != nil {
			return
		}
		again, err := json.Marshal(dt)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rt, err := Decode(again)
		if err != nil {
			t.Fatalf("round trip: %v\n%s", err, again)
		}
		// workers is omitempty: [] comes back as absent (nil).
		if len(dt.Workers) == 0 {
			dt.Workers = nil
		}
		if !reflect.DeepEqual(dt, rt) {
			t.Fatalf("round trip changed the template:\n%+v\n%+v", dt, rt)
		}
	})
}

// FuzzSchemaCheck checks arbitrary JSON against the template schema: the
// library never fails (a panic or an internal error is reported as rule
// "schema"), and every error names the document. Seeds: the shipped
// templates, the broken fixtures and the table of schema_test.go.
func FuzzSchemaCheck(f *testing.F) {
	addTemplateSeeds(f)
	for _, tc := range schemaCases() {
		if len(tc.data) < 4096 {
			f.Add([]byte(tc.data))
		}
	}
	sch, err := compiledSchema()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := parseJSON(data)
		if err != nil {
			return
		}
		for _, e := range schemaCheck(sch, "x.json", doc) {
			if e.Rule == "schema" || e.File != "x.json" || (e.Path != "" && !strings.HasPrefix(e.Path, "/")) {
				t.Fatalf("%v", e)
			}
		}
	})
}

// addTemplateSeeds adds the shipped templates and every broken fixture to
// f's seed corpus.
func addTemplateSeeds(f *testing.F) {
	f.Helper()
	seeds, _ := fs.Glob(Shipped(), "*.json")
	for _, s := range seeds {
		data, err := fs.ReadFile(Shipped(), s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	broken, _ := filepath.Glob(filepath.Join("testdata", "broken", "*.json"))
	for _, s := range broken {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}
