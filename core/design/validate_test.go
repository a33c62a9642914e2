package design

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The embedded schema compiles with the library, and is the schema the
// tests expect: every template member is known, additionalProperties false.
func TestSchemaCompiles(t *testing.T) {
	sch, err := compiledSchema()
	if err != nil {
		t.Fatal(err)
	}
	if sch.Types == nil || len(sch.Properties) == 0 || len(sch.Required) == 0 || sch.AdditionalProperties != false {
		t.Errorf("schema compiled empty: %+v", sch)
	}
}

// The templates shipped in the binary and in configs/templates validate as
// one set.
func TestShippedTemplatesValid(t *testing.T) {
	set, err := Validator{}.Load(Shipped(), "embedded")
	if err != nil {
		t.Fatalf("embedded templates:\n%v", err)
	}
	for _, want := range []string{"master", "worker", "echo"} {
		if _, ok := set.Get(want); !ok {
			t.Errorf("embedded set lacks %s; has %v", want, set.Names())
		}
	}
	if _, err := (Validator{}).LoadDir(filepath.Join("..", "..", "configs", "templates")); err != nil {
		t.Fatalf("configs/templates:\n%v", err)
	}
}

// Every broken fixture yields every one of its errors, with file and path;
// the full report is a golden file (go test -run TestBrokenGolden -update).
func TestBrokenGolden(t *testing.T) {
	set, err := Validator{}.LoadDir(filepath.Join("testdata", "broken"))
	if set.Len() != 0 {
		t.Errorf("broken set holds valid templates %v", set.Names())
	}
	var errs ValidationErrors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v, want ValidationErrors", err)
	}
	if !errors.Is(err, ErrInvalidTemplate) {
		t.Error("ValidationErrors does not match ErrInvalidTemplate")
	}
	got := filepath.ToSlash(errs.Error()) + "\n"
	golden := filepath.Join("testdata", "broken.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("report differs from %s (-update rewrites it)\ngot:\n%s\nwant:\n%s", golden, got, want)
	}

	// Each fixture is named for what it breaks; check that each one is
	// reported with the rule it is about.
	for file, rule := range map[string]string{
		"unknown_field.json":     "/colour: additionalProperties",
		"missing_field.json":     "/version: required",
		"wrong_type.json":        "/context_budget/max_messages: type",
		"unknown_tool.json":      "/tools/1: unknown_tool",
		"worker_missing.json":    "/workers/0: missing_worker",
		"bad_name.json":          "/name: pattern",
		"negative_budget.json":   "/context_budget/max_messages: minimum",
		"invalid_json.json":      "/: syntax: line 5, column 3",
		"openai_incomplete.json": "/brain/base_url: required",
		"renamed.json":           "/name: file_name",
	} {
		if !strings.Contains(got, "testdata/broken/"+file+": "+rule) {
			t.Errorf("report lacks %s: %s", file, rule)
		}
	}
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string // "path: rule" of every error, in order
	}{
		{"valid", string(tmpl(t, "a", "worker")), nil},
		{"empty", "", []string{": syntax"}},
		{"not an object", `[1,2]`, []string{": type"}},
		{"trailing data", string(tmpl(t, "a", "worker")) + "{}", []string{": syntax"}},
		{"truncated", `{"name": "a"`, []string{": syntax"}},
		{"bad role", string(tmpl(t, "a", "boss")), []string{"/role: enum"}},
		{"bad provider", strings.Replace(string(tmpl(t, "a", "worker")), `"echo"`, `"gpt"`, 1), []string{"/brain/provider: enum"}},
		{"openai complete", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["brain"] = map[string]any{"provider": "openai", "base_url": "http://127.0.0.1:11434/v1", "model": "llama3", "api_key_env": "OPENAI_API_KEY"}
		})), nil},
		{"openai without url", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["brain"] = map[string]any{"provider": "openai", "model": "llama3"}
		})), []string{"/brain/base_url: required"}},
		{"float for integer", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["limits"] = map[string]any{"max_steps": 2.5}
		})), []string{"/limits/max_steps: type"}},
		{"integral float", `{"name":"a","version":"1.0.0","role":"worker","brain":{"provider":"echo"},"system_prompt":"","tools":[],"context_budget":{"max_messages":1.0}}`,
			[]string{"/context_budget/max_messages: type"}},
		{"too big for 32 bits", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["limits"] = map[string]any{"max_task_bytes": 1 << 40}
		})), []string{"/limits/max_task_bytes: maximum"}},
		{"duplicate tool", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["tools"] = []any{"sleep_ms", "sleep_ms"}
		})), []string{"/tools: uniqueItems"}},
		{"workers on a worker", string(tmpl(t, "a", "worker", withWorkers("b"))), []string{"/workers: workers_on_worker"}},
		{"unknown tool and unknown field", string(tmpl(t, "a", "worker", func(m map[string]any) {
			m["tools"] = []any{"nope"}
			m["extra"] = true
		})), []string{"/extra: additionalProperties", "/tools/0: unknown_tool"}},
		{"bad version", string(tmpl(t, "a", "worker", withVersion("v1"))), []string{"/version: pattern"}},
		{"storage url", string(tmpl(t, "a", "worker", func(m map[string]any) { m["storage"] = "bbolt:///var/lib/x" })), nil},
		{"bad storage url", string(tmpl(t, "a", "worker", func(m map[string]any) { m["storage"] = "/var/lib/x" })), []string{"/storage: pattern"}},
		{"case-folded key", strings.Replace(string(tmpl(t, "a", "worker")), `"name"`, `"NAME"`, 1), []string{"/NAME: additionalProperties", "/name: required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Validator{}.Validate("x.json", []byte(tc.data))
			var got []string
			var errs ValidationErrors
			if errors.As(err, &errs) {
				for _, e := range errs {
					if e.File != "x.json" {
						t.Errorf("error names file %q", e.File)
					}
					got = append(got, e.Path+": "+e.Rule)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want ValidationErrors", err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n%v\nwant:\n%v\n(%v)", strings.Join(got, "\n"), strings.Join(tc.want, "\n"), err)
			}
			if (tp != nil) != (len(tc.want) == 0) {
				t.Errorf("template = %v with %d errors", tp, len(tc.want))
			}
		})
	}
}

func TestKnownTool(t *testing.T) {
	data := tmpl(t, "a", "worker", func(m map[string]any) { m["tools"] = []any{"sleep_ms", "camera"} })
	if _, err := (Validator{}).Validate("a.json", data); err == nil {
		t.Fatal("built-in list accepted camera")
	}
	v := Validator{KnownTool: func(n string) bool { return n == "camera" || n == "sleep_ms" }}
	if _, err := v.Validate("a.json", data); err != nil {
		t.Fatal(err)
	}
	for _, n := range BuiltinTools() {
		if !(Validator{}).knownTool(n) {
			t.Errorf("built-in %s not known", n)
		}
	}
}

func TestSetRules(t *testing.T) {
	fsys := fstest.MapFS{
		"master.json":  {Data: tmpl(t, "master", "master", withWorkers("worker", "boss", "ghost", "broken"))},
		"worker.json":  {Data: tmpl(t, "worker", "worker")},
		"boss.json":    {Data: tmpl(t, "boss", "master")},
		"broken.json":  {Data: []byte(`{`)},
		"copy.json":    {Data: tmpl(t, "worker", "worker")},
		"solo.json":    {Data: tmpl(t, "solo", "worker")},
		"notes.txt":    {Data: []byte("not a template")},
		".hidden.json": {Data: []byte(`{`)},
		"sub/x.json":   {Data: []byte(`{`)},
	}
	set, err := Validator{}.Load(fsys, "tpl")
	var errs ValidationErrors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	got := errs.Error()
	for _, want := range []string{
		`tpl/broken.json: /: syntax`,
		`tpl/copy.json: /name: duplicate_name: name "worker" is also defined in tpl/worker.json`,
		`tpl/copy.json: /name: file_name`,
		`tpl/master.json: /workers/1: not_a_worker: template "boss" has role "master", want "worker"`,
		`tpl/master.json: /workers/2: missing_worker: worker template "ghost" is not in the set`,
		`tpl/master.json: /workers/3: missing_worker: worker template "broken" is invalid (see tpl/broken.json)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hidden") || strings.Contains(got, "sub/") || strings.Contains(got, "notes") {
		t.Errorf("errors name skipped files:\n%s", got)
	}
	if names := strings.Join(set.Names(), ","); names != "boss,solo,worker" {
		t.Errorf("set = %s, want boss,solo,worker", names)
	}
	e, _ := set.Get("worker")
	if e.Digest != Digest(e.Raw) || e.File != "tpl/worker.json" {
		t.Errorf("entry = %+v", e)
	}
}

// Without a {name}.json, the first file in name order keeps the name.
func TestDuplicateKeepsFirstFile(t *testing.T) {
	fsys := fstest.MapFS{
		"b.json": {Data: tmpl(t, "a", "worker")},
		"c.json": {Data: tmpl(t, "a", "worker")},
	}
	_, err := Validator{}.Load(fsys, "")
	if err == nil || !strings.Contains(err.Error(), `c.json: /name: duplicate_name: name "a" is also defined in b.json`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckTemplate(t *testing.T) {
	good := &Template{Name: "g", Version: "1.0.0", Role: RoleWorker, Brain: Brain{Provider: "echo"},
		Tools: []string{"sleep_ms"}, ContextBudget: ContextBudget{MaxMessages: 10}}
	if err := (Validator{}).CheckTemplate("g", good); err != nil {
		t.Fatal(err)
	}
	bad := *good
	bad.ContextBudget.MaxMessages = 0
	bad.Tools = nil
	err := Validator{}.CheckTemplate("g", &bad)
	if err == nil || !strings.Contains(err.Error(), "/context_budget/max_messages: minimum") || !strings.Contains(err.Error(), "/tools: type") {
		t.Fatalf("err = %v", err)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	es := ValidationErrors{
		{File: "a.json", Path: "/limits/max_steps", Rule: "minimum", Message: "must be a positive integer, got 0"},
		{File: "b.json", Rule: RuleSyntax, Message: "empty file"},
	}
	want := "a.json: /limits/max_steps: minimum: must be a positive integer, got 0\nb.json: /: syntax: empty file"
	if es.Error() != want {
		t.Errorf("Error() = %q", es.Error())
	}
	if es.Files() != 2 || len(es.ForFile("b.json")) != 1 {
		t.Error("Files/ForFile")
	}
	if (ValidationErrors(nil)).orNil() != nil {
		t.Error("empty ValidationErrors is a non-nil error")
	}
}

func TestPointerEscape(t *testing.T) {
	data := tmpl(t, "a", "worker", func(m map[string]any) { m["a/b~c"] = 1 })
	_, err := Validator{}.Validate("a.json", data)
	if err == nil || !strings.Contains(err.Error(), "a.json: /a~1b~0c: additionalProperties") {
		t.Fatalf("err = %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	data := make([]byte, MaxTemplateBytes+1)
	_, err := Validator{}.Validate("big.json", data)
	if err == nil || !strings.Contains(err.Error(), "big.json: /: size") {
		t.Fatalf("err = %v", err)
	}
}
