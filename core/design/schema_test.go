package design

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// checkDoc runs the schema part of Validate on data: the library, through
// schemaCheck. The errors are sorted. It fails t when data is not JSON or
// the library panicked (an error of rule "schema").
func checkDoc(t testing.TB, sch *jsonschema.Schema, data []byte) ValidationErrors {
	t.Helper()
	doc, err := parseJSON(data)
	if err != nil {
		t.Fatalf("%.200s: %v", data, err)
	}
	errs := schemaCheck(sch, "x.json", doc)
	sortErrors(errs)
	for _, e := range errs {
		if e.Rule == "schema" {
			t.Errorf("%.200s: %v", data, e)
		}
	}
	return errs
}

func pathRules(errs ValidationErrors) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Path+": "+e.Rule)
	}
	return out
}

// testDoc returns a template valid by the schema, as JSON; mods edit it
// first. json.Number values keep their spelling (1.0, 1e3).
func testDoc(mods ...func(m map[string]any)) string {
	m := map[string]any{
		"name":           "a",
		"version":        "1.0.0",
		"role":           "worker",
		"brain":          map[string]any{"provider": "echo"},
		"system_prompt":  "x",
		"tools":          []any{"sleep_ms"},
		"context_budget": map[string]any{"max_messages": json.Number("10")},
	}
	for _, mod := range mods {
		mod(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// set sets the member at a /-separated path (objects only), creating
// objects on the way.
func set(path string, v any) func(map[string]any) {
	return func(m map[string]any) {
		toks := strings.Split(path, "/")
		for _, tok := range toks[:len(toks)-1] {
			next, ok := m[tok].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[tok] = next
			}
			m = next
		}
		m[toks[len(toks)-1]] = v
	}
}

func del(name string) func(map[string]any) {
	return func(m map[string]any) { delete(m, name) }
}

func num(s string) json.Number { return json.Number(s) }

func strs(ss ...string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func manyNames(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%d", i)
	}
	return out
}

type schemaCase struct {
	name string
	data string
	want []string // "path: rule" of every schema error, sorted
}

// schemaCases hit every keyword of template.schema.json both ways.
func schemaCases() []schemaCase {
	openai := map[string]any{"provider": "openai", "base_url": "http://127.0.0.1:11434/v1", "model": "llama3"}
	withOpenAI := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) {
			b := map[string]any{}
			for k, v := range openai {
				b[k] = v
			}
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
			m["brain"] = b
		}
	}
	allNull := func(m map[string]any) {
		for _, k := range []string{"name", "version", "role", "description", "brain", "system_prompt", "tools", "context_budget", "storage", "limits", "workers"} {
			m[k] = nil
		}
	}
	long := func(s string, n int) string { return strings.Repeat(s, n) }
	return []schemaCase{
		{name: "valid minimal", data: testDoc()},
		{name: "valid full", data: testDoc(
			set("description", long("é", 4096)),
			set("brain", map[string]any{"provider": "openai", "base_url": "https://x.example/v1", "model": long("😀", 256), "api_key_env": "_K9", "timeout_ms": num("60000")}),
			set("storage", "sqlite:///var/lib/x.db"),
			set("limits", map[string]any{"max_steps": num("1"), "max_task_bytes": num("2147483647"), "tool_timeout_ms": num("1e3"), "max_queue": num("1.0")}),
			set("context_budget", map[string]any{"max_messages": num("1"), "max_tokens": num("10E+2")}),
			set("workers", strs("b", "c-d", "e_f")),
			set("name", "a"+long("b", 63)),
			set("version", "10.20.30-rc.1+build.5"),
		)},
		{name: "root null", data: `null`, want: []string{": type"}},
		{name: "root array", data: `[]`, want: []string{": type"}},
		{name: "root string", data: `"{}"`, want: []string{": type"}},
		{name: "root number", data: `1`, want: []string{": type"}},
		{name: "empty object", data: `{}`, want: []string{"/brain: required", "/context_budget: required", "/name: required", "/role: required", "/system_prompt: required", "/tools: required", "/version: required"}},
		{name: "null everywhere", data: testDoc(allNull), want: []string{"/brain: type", "/context_budget: type", "/description: type", "/limits: type", "/name: type", "/role: enum", "/storage: type", "/system_prompt: type", "/tools: type", "/version: type", "/workers: type"}},
		{name: "wrong types everywhere", data: testDoc(set("name", num("1")), set("version", true), set("role", num("1")), set("description", []any{}), set("brain", "echo"), set("system_prompt", map[string]any{}), set("tools", "sleep_ms"), set("context_budget", []any{}), set("storage", num("1")), set("limits", "x"), set("workers", map[string]any{})),
			want: []string{"/brain: type", "/context_budget: type", "/description: type", "/limits: type", "/name: type", "/role: enum", "/storage: type", "/system_prompt: type", "/tools: type", "/version: type", "/workers: type"}},
		{name: "unknown root field", data: testDoc(set("colour", "blue")), want: []string{"/colour: additionalProperties"}},
		{name: "unknown field escaped", data: testDoc(func(m map[string]any) { m["a/b~c"] = nil }), want: []string{"/a~1b~0c: additionalProperties"}},
		{name: "unknown fields nested", data: testDoc(set("brain/temperature", num("0.2")), set("context_budget/x", nil), set("limits/y", num("1")), set("limits/max_steps", num("3"))),
			want: []string{"/brain/temperature: additionalProperties", "/context_budget/x: additionalProperties", "/limits/y: additionalProperties"}},
		{name: "case-folded key", data: testDoc(del("name"), set("NAME", "a")), want: []string{"/NAME: additionalProperties", "/name: required"}},
		{name: "name pattern", data: testDoc(set("name", "Bad Name")), want: []string{"/name: pattern"}},
		{name: "name quoting", data: testDoc(set("name", "it's \"q\"\n\x00é")), want: []string{"/name: pattern"}},
		{name: "name too long", data: testDoc(set("name", "a"+long("b", 64))), want: []string{"/name: pattern"}},
		{name: "name empty", data: testDoc(set("name", "")), want: []string{"/name: pattern"}},
		{name: "version pattern", data: testDoc(set("version", "v1")), want: []string{"/version: pattern"}},
		{name: "version at maxLength", data: testDoc(set("version", "1.0.0-"+long("a", 58))), want: nil},
		{name: "version over maxLength", data: testDoc(set("version", "1.0.0-"+long("a", 59))), want: []string{"/version: maxLength"}},
		{name: "version over maxLength and pattern", data: testDoc(set("version", long("é", 65))), want: []string{"/version: maxLength", "/version: pattern"}},
		{name: "role enum", data: testDoc(set("role", "boss")), want: []string{"/role: enum"}},
		{name: "role object", data: testDoc(set("role", map[string]any{"master": true})), want: []string{"/role: enum"}},
		{name: "role bool", data: testDoc(set("role", false)), want: []string{"/role: enum"}},
		{name: "description multibyte at maxLength", data: testDoc(set("description", long("😀", 4096))), want: nil},
		{name: "description multibyte over maxLength", data: testDoc(set("description", long("😀", 4097))), want: []string{"/description: maxLength"}},
		{name: "system_prompt at maxLength", data: testDoc(set("system_prompt", long("é", 65536))), want: nil},
		{name: "system_prompt over maxLength", data: testDoc(set("system_prompt", long("é", 65537))), want: []string{"/system_prompt: maxLength"}},
		{name: "brain empty", data: testDoc(set("brain", map[string]any{})), want: []string{"/brain/provider: required"}},
		{name: "brain array", data: testDoc(set("brain", []any{"echo"})), want: []string{"/brain: type"}},
		{name: "provider enum", data: testDoc(set("brain/provider", "gpt")), want: []string{"/brain/provider: enum"}},
		{name: "provider null", data: testDoc(set("brain/provider", nil)), want: []string{"/brain/provider: enum"}},
		{name: "provider number", data: testDoc(set("brain/provider", num("1.5"))), want: []string{"/brain/provider: enum"}},
		{name: "openai complete", data: testDoc(withOpenAI("", nil))},
		{name: "openai without base_url", data: testDoc(withOpenAI("base_url", nil)), want: []string{"/brain/base_url: required"}},
		{name: "openai without base_url and model", data: testDoc(set("brain", map[string]any{"provider": "openai"})), want: []string{"/brain/base_url: required", "/brain/model: required"}},
		{name: "openai bad url", data: testDoc(withOpenAI("base_url", "ftp://x")), want: []string{"/brain/base_url: pattern"}},
		{name: "openai url with space", data: testDoc(withOpenAI("base_url", "http://a b")), want: []string{"/brain/base_url: pattern"}},
		{name: "openai empty model", data: testDoc(withOpenAI("model", "")), want: []string{"/brain/model: minLength"}},
		{name: "openai model over maxLength", data: testDoc(withOpenAI("model", long("😀", 257))), want: []string{"/brain/model: maxLength"}},
		{name: "openai model null", data: testDoc(withOpenAI("model", []any{})), want: []string{"/brain/model: type"}},
		{name: "openai unknown field", data: testDoc(withOpenAI("x", num("1"))), want: []string{"/brain/x: additionalProperties"}},
		{name: "echo with base_url", data: testDoc(set("brain/base_url", "http://x"))},
		{name: "api_key_env pattern", data: testDoc(set("brain/api_key_env", "OPENAI-KEY")), want: []string{"/brain/api_key_env: pattern"}},
		{name: "api_key_env number", data: testDoc(set("brain/api_key_env", num("5"))), want: []string{"/brain/api_key_env: type"}},
		{name: "integer 1", data: testDoc(set("brain/timeout_ms", num("1")))},
		{name: "integer 1.0", data: testDoc(set("brain/timeout_ms", num("1.0")))},
		{name: "integer 1e3", data: testDoc(set("brain/timeout_ms", num("1e3")))},
		{name: "integer 10e-1", data: testDoc(set("brain/timeout_ms", num("10e-1")))},
		{name: "integer 1.5e1", data: testDoc(set("brain/timeout_ms", num("1.5e1")))},
		{name: "integer 15e-1", data: testDoc(set("brain/timeout_ms", num("15e-1"))), want: []string{"/brain/timeout_ms: type"}},
		{name: "integer string", data: testDoc(set("brain/timeout_ms", "1")), want: []string{"/brain/timeout_ms: type"}},
		{name: "integer 2.5", data: testDoc(set("limits/max_steps", num("2.5"))), want: []string{"/limits/max_steps: type"}},
		{name: "integer bool", data: testDoc(set("limits/max_steps", true)), want: []string{"/limits/max_steps: type"}},
		{name: "minimum 0", data: testDoc(set("limits/max_steps", num("0"))), want: []string{"/limits/max_steps: minimum"}},
		{name: "minimum -0", data: testDoc(set("limits/max_steps", num("-0"))), want: []string{"/limits/max_steps: minimum"}},
		{name: "minimum 0.0e5", data: testDoc(set("limits/max_steps", num("0.0e5"))), want: []string{"/limits/max_steps: minimum"}},
		{name: "minimum -5", data: testDoc(set("context_budget/max_messages", num("-5"))), want: []string{"/context_budget/max_messages: minimum"}},
		{name: "minimum huge negative", data: testDoc(set("context_budget/max_tokens", num("-1e400"))), want: []string{"/context_budget/max_tokens: minimum"}},
		{name: "maximum 2147483647", data: testDoc(set("limits/max_queue", num("2147483647")))},
		{name: "maximum 2147483648", data: testDoc(set("limits/max_queue", num("2147483648"))), want: []string{"/limits/max_queue: maximum"}},
		{name: "maximum 2147483647.0", data: testDoc(set("limits/max_queue", num("2147483647.0")))},
		{name: "maximum 2.147483648e9", data: testDoc(set("limits/max_queue", num("2.147483648e9"))), want: []string{"/limits/max_queue: maximum"}},
		{name: "maximum 3000000000", data: testDoc(set("limits/max_queue", num("3000000000"))), want: []string{"/limits/max_queue: maximum"}},
		{name: "maximum 1e400", data: testDoc(set("limits/max_task_bytes", num("1e400"))), want: []string{"/limits/max_task_bytes: maximum"}},
		{name: "maximum 99 digits", data: testDoc(set("limits/max_task_bytes", num(long("9", 99)))), want: []string{"/limits/max_task_bytes: maximum"}},
		{name: "tiny fraction", data: testDoc(set("limits/tool_timeout_ms", num("1e-400"))), want: []string{"/limits/tool_timeout_ms: type"}},
		{name: "exponent beyond big.Rat", data: testDoc(set("limits/tool_timeout_ms", num("1e2000000"))), want: []string{"/limits/tool_timeout_ms: type"}},
		{name: "exponent beyond int64", data: testDoc(set("limits/tool_timeout_ms", num("1e99999999999999999999"))), want: []string{"/limits/tool_timeout_ms: type"}},
		{name: "zero with exponent beyond big.Rat", data: testDoc(set("limits/tool_timeout_ms", num("0e2000000"))), want: []string{"/limits/tool_timeout_ms: minimum"}},
		{name: "context_budget empty", data: testDoc(set("context_budget", map[string]any{})), want: []string{"/context_budget/max_messages: required"}},
		{name: "context_budget null", data: testDoc(set("context_budget/max_messages", nil)), want: []string{"/context_budget/max_messages: type"}},
		{name: "storage pattern", data: testDoc(set("storage", "/var/lib/x")), want: []string{"/storage: pattern"}},
		{name: "storage ok", data: testDoc(set("storage", "bbolt:///var/lib/x"))},
		{name: "limits empty", data: testDoc(set("limits", map[string]any{}))},
		{name: "limits null member", data: testDoc(set("limits/max_steps", nil)), want: []string{"/limits/max_steps: type"}},
		{name: "tools empty", data: testDoc(set("tools", []any{}))},
		{name: "tools item types", data: testDoc(set("tools", []any{num("1"), nil, true, []any{}, map[string]any{}})), want: []string{"/tools/0: type", "/tools/1: type", "/tools/2: type", "/tools/3: type", "/tools/4: type"}},
		{name: "tools item pattern", data: testDoc(set("tools", strs("Sleep", "a-b", "ok_1"))), want: []string{"/tools/0: pattern", "/tools/1: pattern"}},
		{name: "tools duplicate", data: testDoc(set("tools", strs("sleep_ms", "file_append", "sleep_ms"))), want: []string{"/tools: uniqueItems"}},
		{name: "tools equal numbers", data: testDoc(set("tools", []any{num("1"), num("1.0"), num("1e0")})), want: []string{"/tools: uniqueItems", "/tools/0: type", "/tools/1: type", "/tools/2: type"}},
		{name: "tools distinct numbers", data: testDoc(set("tools", []any{num("1"), num("-1"), num("0.1"), num("10")})), want: []string{"/tools/0: type", "/tools/1: type", "/tools/2: type", "/tools/3: type"}},
		{name: "tools zeros", data: testDoc(set("tools", []any{num("0"), num("-0.0")})), want: []string{"/tools: uniqueItems", "/tools/0: type", "/tools/1: type"}},
		{name: "tools equal objects", data: testDoc(set("tools", []any{map[string]any{"a": num("1"), "b": []any{nil}}, map[string]any{"b": []any{nil}, "a": num("100e-2")}})), want: []string{"/tools: uniqueItems", "/tools/0: type", "/tools/1: type"}},
		{name: "tools unequal objects", data: testDoc(set("tools", []any{map[string]any{"a": num("1")}, map[string]any{"a": "1"}, []any{num("1")}, []any{"1"}})), want: []string{"/tools/0: type", "/tools/1: type", "/tools/2: type", "/tools/3: type"}},
		{name: "tools duplicate nulls", data: testDoc(set("tools", []any{nil, false, nil})), want: []string{"/tools: uniqueItems", "/tools/0: type", "/tools/1: type", "/tools/2: type"}},
		{name: "tools huge exponents never equal", data: testDoc(set("tools", []any{num("1e2000000"), num("1e2000000")})), want: []string{"/tools/0: type", "/tools/1: type"}},
		{name: "tools at maxItems", data: testDoc(set("tools", manyNames(64)))},
		{name: "tools over maxItems", data: testDoc(set("tools", manyNames(65))), want: []string{"/tools: maxItems"}},
		{name: "tools long with duplicate", data: testDoc(set("tools", append(manyNames(30), "t25", "t3"))), want: []string{"/tools: uniqueItems"}},
		{name: "tools thousands", data: testDoc(set("tools", append(manyNames(1500), "t1499"))), want: []string{"/tools: maxItems", "/tools: uniqueItems"}},
		// Upstream v6.0.3 of the library panicked here (a nil big.Rat in
		// uniqueItems over more than 20 items); third_party/jsonschema does not.
		{name: "uniqueItems over a number big.Rat refuses", data: testDoc(set("tools", append(manyNames(21), num("1e9999999")))), want: []string{"/tools/21: type"}},
		{name: "workers ok", data: testDoc(set("workers", strs("b", "c")))},
		{name: "workers duplicate", data: testDoc(set("workers", strs("b", "b"))), want: []string{"/workers: uniqueItems"}},
		{name: "workers ref pattern", data: testDoc(set("workers", strs("Bad", "ok", ""))), want: []string{"/workers/0: pattern", "/workers/2: pattern"}},
		{name: "workers ref type", data: testDoc(set("workers", []any{num("1"), nil})), want: []string{"/workers/0: type", "/workers/1: type"}},
		{name: "workers over maxItems", data: testDoc(set("workers", manyNames(65))), want: []string{"/workers: maxItems"}},
	}
}

// Every keyword of template.schema.json, both ways: each broken rule is
// reported at the JSON pointer of the offending member with the keyword as
// its rule.
func TestSchemaRules(t *testing.T) {
	sch, err := compiledSchema()
	if err != nil {
		t.Fatal(err)
	}
	valid, invalid := 0, 0
	for _, tc := range schemaCases() {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkDoc(t, sch, []byte(tc.data))
			if got := pathRules(errs); !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s\n(%v)", strings.Join(got, "\n"), strings.Join(tc.want, "\n"), errs)
			}
			if len(tc.want) == 0 {
				valid++
			} else {
				invalid++
			}
		})
	}
	if valid < 10 || invalid < 40 {
		t.Errorf("table has %d valid and %d invalid documents", valid, invalid)
	}
}

// The shipped templates pass the schema, and every fixture (JSON files and
// fuzz corpus entries) is checked without the library failing.
func TestSchemaFixtures(t *testing.T) {
	sch, err := compiledSchema()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("configs", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join("..", "..", "configs", "templates", "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("configs/templates: %v %v", files, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if errs := checkDoc(t, sch, data); len(errs) > 0 {
				t.Errorf("%s: %v", f, errs)
			}
		}
	})
	t.Run("testdata", func(t *testing.T) {
		n := 0
		err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			inputs := [][]byte{data}
			if strings.HasPrefix(filepath.ToSlash(path), "testdata/fuzz/") {
				inputs = corpusInputs(t, path, data)
			} else if filepath.Ext(path) != ".json" {
				return nil
			}
			for _, in := range inputs {
				if _, err := parseJSON(in); err == nil {
					checkDoc(t, sch, in)
				}
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n < 10 {
			t.Errorf("only %d fixtures", n)
		}
	})
}

// keywordsSchema is testdata/keywords.schema.json: keywords
// template.schema.json does not use today (const, if/then/else, false
// schemas, bounds on negative and fractional numbers). schemaErrors maps
// them as it maps the template schema's.
var keywordsSchema = filepath.Join("testdata", "keywords.schema.json")

func TestSchemaKeywords(t *testing.T) {
	data, err := os.ReadFile(keywordsSchema)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const id = "https://example.invalid/keywords.schema.json"
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data string
		want []string
	}{
		{`{"r":0}`, nil},
		{`{}`, []string{"/r: required"}},
		{`[]`, []string{": type"}},
		{`{"r":{"any":[1]},"c":"x","cn":1,"cnull":null,"cobj":{"a":[1.0,"b"]},"e":1.0,"n":0.5,"neg":-1,"tn":null,"arr":[1,"a"],"noitems":[],"cond":"ab","obj":{"x":5},"zz":-1}`, nil},
		{`{"r":0,"c":"y"}`, []string{"/c: const"}},
		{`{"r":0,"c":1}`, []string{"/c: const"}},
		{`{"r":0,"cn":1.00}`, nil},
		{`{"r":0,"cn":1e0}`, nil},
		{`{"r":0,"cn":"1"}`, []string{"/cn: const"}},
		{`{"r":0,"cn":2}`, []string{"/cn: const"}},
		{`{"r":0,"cnull":0}`, []string{"/cnull: const"}},
		{`{"r":0,"cnull":false}`, []string{"/cnull: const"}},
		{`{"r":0,"cobj":{"a":[1,"b"],"z":1}}`, []string{"/cobj: const"}},
		{`{"r":0,"cobj":{"a":[1]}}`, []string{"/cobj: const"}},
		{`{"r":0,"e":"1"}`, nil},
		{`{"r":0,"e":null}`, nil},
		{`{"r":0,"e":true}`, nil},
		{`{"r":0,"e":[1.0]}`, nil},
		{`{"r":0,"e":{"a":1e0}}`, nil},
		{`{"r":0,"e":false}`, []string{"/e: enum"}},
		{`{"r":0,"e":"2"}`, []string{"/e: enum"}},
		{`{"r":0,"e":[]}`, []string{"/e: enum"}},
		{`{"r":0,"e":{}}`, []string{"/e: enum"}},
		{`{"r":0,"n":0.49}`, []string{"/n: minimum"}},
		{`{"r":0,"n":0}`, []string{"/n: minimum"}},
		{`{"r":0,"n":100}`, nil},
		{`{"r":0,"n":100.0001}`, []string{"/n: maximum"}},
		{`{"r":0,"n":1e3}`, []string{"/n: maximum"}},
		{`{"r":0,"n":"1"}`, []string{"/n: type"}},
		{`{"r":0,"neg":0}`, []string{"/neg: maximum"}},
		{`{"r":0,"neg":-4}`, []string{"/neg: minimum"}},
		{`{"r":0,"neg":-2.5}`, []string{"/neg: type"}},
		{`{"r":0,"tn":""}`, []string{"/tn: minLength"}},
		{`{"r":0,"tn":"a"}`, nil},
		{`{"r":0,"tn":1}`, []string{"/tn: type"}},
		{`{"r":0,"arr":[1]}`, []string{"/arr: minItems"}},
		{`{"r":0,"arr":[]}`, []string{"/arr: minItems"}},
		{`{"r":0,"arr":[1,2,3,4]}`, []string{"/arr: maxItems"}},
		{`{"r":0,"arr":[1,1.0]}`, []string{"/arr: uniqueItems"}},
		{`{"r":0,"arr":[10,"ab"]}`, []string{"/arr/0: maximum", "/arr/1: maxLength"}},
		{`{"r":0,"arr":[true,null]}`, []string{"/arr/0: type", "/arr/1: type"}},
		{`{"r":0,"noitems":[1,[]]}`, []string{"/noitems/0: not_allowed", "/noitems/1: not_allowed"}},
		{`{"r":0,"noitems":"str"}`, nil},
		{`{"r":0,"f":null}`, []string{"/f: not_allowed"}},
		{`{"r":0,"cond":"a"}`, []string{"/cond: minLength"}},
		{`{"r":0,"cond":"abcd"}`, []string{"/cond: maxLength"}},
		{`{"r":0,"cond":10}`, nil},
		{`{"r":0,"cond":9}`, []string{"/cond: minimum"}},
		{`{"r":0,"cond":9.5}`, []string{"/cond: type"}},
		{`{"r":0,"cond":null}`, []string{"/cond: type"}},
		{`{"r":0,"obj":{"x":10}}`, []string{"/obj/x: maximum"}},
		{`{"r":0,"obj":{"y":{"id":"12"}}}`, nil},
		{`{"r":0,"obj":{"y":{"id":"a"}}}`, []string{"/obj/y/id: pattern"}},
		{`{"r":0,"obj":{"y":{}}}`, []string{"/obj/y/id: required"}},
		{`{"r":0,"obj":{"y":{"id":"1","z":0}}}`, []string{"/obj/y/z: additionalProperties"}},
		{`{"r":0,"obj":{"y":1}}`, []string{"/obj/y: type"}},
		{`{"r":0,"obj":5}`, nil},
		{`{"r":0,"zz":0}`, []string{"/zz: maximum"}},
		{`{"r":0,"zz":true}`, nil},
		{`{"r":0,"zz":"s"}`, []string{"/zz: type"}},
	} {
		errs := checkDoc(t, sch, []byte(tc.data))
		if got := pathRules(errs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: errors\n%s\nwant\n%s\n(%v)", tc.data, strings.Join(got, "\n"), strings.Join(tc.want, "\n"), errs)
		}
	}
	// The library's wording for const.
	for _, tc := range []struct{ data, want string }{
		{`{"r":0,"c":"y"}`, "/c: const: value must be 'x'"},
		{`{"r":0,"cn":2}`, "/cn: const: value must be 1.0"},
		{`{"r":0,"cnull":0}`, "/cnull: const: value must be <nil>"},
		{`{"r":0,"cobj":{"a":[1]}}`, "/cobj: const: 'const' failed"},
	} {
		if got := checkDoc(t, sch, []byte(tc.data)).Error(); got != "x.json: "+tc.want {
			t.Errorf("%s: got %q, want %q", tc.data, got, "x.json: "+tc.want)
		}
	}
}

// corpusInputs reads the []byte values of a "go test fuzz v1" file.
func corpusInputs(t testing.TB, path string, data []byte) [][]byte {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) == 0 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", path)
	}
	var out [][]byte
	for _, l := range lines[1:] {
		q, ok := strings.CutPrefix(l, "[]byte(")
		if !ok || !strings.HasSuffix(q, ")") {
			continue
		}
		s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, []byte(s))
	}
	return out
}

// Messages are the library's, word for word; the golden file and the

// Messages: the golden file pins most, these the rest.
func TestSchemaMessages(t *testing.T) {
	sch, err := compiledSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ data, want string }{
		{testDoc(set("system_prompt", strings.Repeat("é", 65537))), "/system_prompt: maxLength: maxLength: got 65,537, want 65,536"},
		{testDoc(set("brain", map[string]any{"provider": "openai", "base_url": "http://x", "model": ""})), "/brain/model: minLength: minLength: got 0, want 1"},
		{testDoc(set("tools", manyNames(1065))), "/tools: maxItems: maxItems: got 1,065, want 64"},
		{testDoc(set("tools", strs("a", "b", "a"))), "/tools: uniqueItems: items at 0 and 2 are equal"},
		{testDoc(set("name", "it's \"q\"\n")), `/name: pattern: 'it\'s "q"\n' does not match pattern '^[a-z0-9][a-z0-9_-]{0,63}$'`},
		{testDoc(set("role", num("1e0"))), `/role: enum: got 1e0, want one of "master", "worker"`},
		{testDoc(set("limits/max_queue", num("1e10"))), "/limits/max_queue: maximum: must be at most 2147483647, got 10000000000"},
		{testDoc(set("limits/max_queue", num("-1.0"))), "/limits/max_queue: minimum: must be a positive integer, got -1"},
		{testDoc(set("limits/max_queue", num("1.5"))), "/limits/max_queue: type: got number, want integer"},
	} {
		errs := checkDoc(t, sch, []byte(tc.data))
		if got := errs.Error(); !strings.Contains(got, "x.json: "+tc.want) {
			t.Errorf("got\n%s\nwant\n%s", got, tc.want)
		}
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 65536: "65,536", 1234567: "1,234,567", -1234: "-1,234"} {
		if got, lib := kind.English.Sprintf("%d", n), message.NewPrinter(language.English).Sprintf("%d", n); got != want || lib != want {
			t.Errorf("kind.English.Sprintf(%d) = %q, x/text's English printer %q, want %q", n, got, lib, want)
		}
	}
}

// A number with a huge exponent is refused without being built: checking
// one costs what checking 1 does. Built exactly (a big.Rat), 1e999999 takes
// about 400 KB and a millisecond, so a template of a megabyte of them kept
// the validator busy for minutes. Measured in bytes allocated, which do not
// depend on the machine's speed.
func TestHugeNumbersCheap(t *testing.T) {
	sch, err := compiledSchema()
	if err != nil {
		t.Fatal(err)
	}
	huge := make([]any, 200)
	for i := range huge {
		huge[i] = num(fmt.Sprintf("%de999999", i+1))
	}
	data := []byte(testDoc(set("tools", huge)))
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.TotalAlloc
	errs := checkDoc(t, sch, data)
	runtime.ReadMemStats(&m)
	if n := m.TotalAlloc - before; n > 4<<20 {
		t.Errorf("checking 200 numbers 1e999999, 2e999999, … allocated %d bytes", n)
	}
	want := []string{"/tools: maxItems"}
	for i := range huge {
		want = append(want, fmt.Sprintf("/tools/%d: type", i))
	}
	slices.Sort(want)
	got := pathRules(errs)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// compileTestSchema compiles the schema src with the library as
// compileSchema does (draft 2020-12 by default); assertFormat turns format
// assertions on.
func compileTestSchema(src string, assertFormat bool) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if assertFormat {
		c.AssertFormat()
	}
	const id = "https://example.invalid/s.json"
	if err := c.AddResource(id, doc); err != nil {
		return nil, err
	}
	return c.Compile(id)
}

// TestSchemaLibraryTrimmed: third_party/jsonschema carries draft 2020-12
// only, the formats its meta-schema asserts, and no file:// loader (see its
// OPENSTARRY.md). What it leaves out is refused with an error naming it,
// never accepted unchecked; what it keeps still works.
func TestSchemaLibraryTrimmed(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		assert       bool
		wantErr      string // a substring of the compile error; "" compiles
		valid        []string
		invalid      []string
	}{
		{name: "draft-07 refused", schema: `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}`, wantErr: `draft "http://json-schema.org/draft-07/schema#" is not supported`},
		{name: "draft-04 refused", schema: `{"$schema": "http://json-schema.org/draft-04/schema#"}`, wantErr: "is not supported"},
		{name: "draft 2019-09 refused", schema: `{"$schema": "https://json-schema.org/draft/2019-09/schema"}`, wantErr: "is not supported"},
		{name: "draft 2020-12 by name", schema: `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}`, valid: []string{`"a"`}, invalid: []string{`1`}},
		{name: "left-out format asserted refused", schema: `{"format": "email"}`, assert: true, wantErr: `format "email" at "https://example.invalid/s.json#" is not built into this copy`},
		{name: "left-out format nested refused", schema: `{"properties": {"at": {"format": "date-time"}}}`, assert: true, wantErr: `format "date-time"`},
		{name: "left-out format as annotation", schema: `{"format": "email"}`, valid: []string{`"not an address"`, `1`}},
		{name: "unknown format asserted ignored", schema: `{"format": "x-custom"}`, assert: true, valid: []string{`"x"`}},
		{name: "uri kept", schema: `{"format": "uri"}`, assert: true, valid: []string{`"https://example.com/a"`, `1`}, invalid: []string{`"relative/path"`, `"http://[::1"`}},
		{name: "uri-reference kept", schema: `{"format": "uri-reference"}`, assert: true, valid: []string{`"relative/path"`}, invalid: []string{`"a\\b"`}},
		{name: "regex kept", schema: `{"format": "regex"}`, assert: true, valid: []string{`"^a+$"`}, invalid: []string{`"(a"`}},
		{name: "file ref not loaded", schema: `{"$ref": "file:///etc/hostname"}`, wantErr: "no URLLoader set"},
		{name: "remote ref not loaded", schema: `{"$ref": "https://example.com/other.json"}`, wantErr: "no URLLoader set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sch, err := compileTestSchema(tc.schema, tc.assert)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("compile %s: %v, want an error with %q", tc.schema, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("compile %s: %v", tc.schema, err)
			}
			for _, v := range tc.valid {
				doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(v))
				if err := sch.Validate(doc); err != nil {
					t.Errorf("%s: %v, want valid", v, err)
				}
			}
			for _, v := range tc.invalid {
				doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(v))
				if err := sch.Validate(doc); err == nil {
					t.Errorf("%s: valid, want invalid", v)
				}
			}
		})
	}
	// The error types, for programs that tell them apart.
	_, err := compileTestSchema(`{"$schema": "http://json-schema.org/draft-06/schema#"}`, false)
	var ud *jsonschema.UnsupportedDraftError
	if !errors.As(err, &ud) {
		t.Errorf("draft-06: %T %v, want *UnsupportedDraftError", err, err)
	}
	_, err = compileTestSchema(`{"format": "ipv4"}`, true)
	var uf *jsonschema.UnsupportedFormatError
	if !errors.As(err, &uf) || uf.Format != "ipv4" {
		t.Errorf("format ipv4: %T %v, want *UnsupportedFormatError", err, err)
	}
}
