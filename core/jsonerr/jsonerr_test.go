package jsonerr

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

type task struct {
	TaskID string          `json:"task_id"`
	Input  json.RawMessage `json:"input,omitempty"`
	Phase  int             `json:"phase"`
	Count  uint            `json:"count"`
	Done   bool            `json:"done"`
	Tags   []string        `json:"tags"`
	Inner  struct {
		Ms float64 `json:"ms"`
	} `json:"inner"`
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`[1,2]`, "task must be a JSON object, not an array"},
		{`"x"`, "task must be a JSON object, not a string"},
		{`{"task_id":7}`, "task: task_id must be a string, not a number"},
		{`{"phase":"one"}`, "task: phase must be an integer, not a string"},
		{`{"phase":1.5}`, "task: phase must be an integer, not the number 1.5"},
		{`{"count":-1}`, "task: count must be an integer of 0 or more, not the number -1"},
		{`{"done":"yes"}`, "task: done must be true or false, not a string"},
		{`{"tags":{}}`, "task: tags must be an array, not an object"},
		{`{"inner":{"ms":true}}`, "task: inner.ms must be a number, not true or false"},
		{`{"task_id":"x2","inptu":"hello"}`, `task has an unknown field "inptu"`},
		{`{"inner":{"sm":1}}`, `task has an unknown field "sm"`},
		{`{"task_id":`, "task is not valid JSON: it ends early"},
		{``, "task is empty: want a JSON object"},
		{`{x}`, "task is not valid JSON: invalid character 'x' looking for beginning of object key string (at byte 2)"},
	} {
		dec := json.NewDecoder(bytes.NewReader([]byte(c.in)))
		dec.DisallowUnknownFields()
		var v task
		err := dec.Decode(&v)
		if err == nil {
			t.Fatalf("%s: decoded", c.in)
		}
		got := Describe("task", err)
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s\n(encoding/json: %v)", c.in, got, c.want, err)
		}
		for _, goWord := range []string{"Go ", "jsonerr.", "struct", "json:", "uint", "float64"} {
			if strings.Contains(got, goWord) {
				t.Errorf("%s: %q names Go (%q)", c.in, got, goWord)
			}
		}
	}
}

func TestUnknown(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"a\"b":1}`))
	dec.DisallowUnknownFields()
	var v task
	name, ok := Unknown(dec.Decode(&v))
	if !ok || name != `a"b` {
		t.Fatalf("Unknown: %q %v", name, ok)
	}
	if _, ok := Unknown(nil); ok {
		t.Fatal("nil is not an unknown field")
	}
}
