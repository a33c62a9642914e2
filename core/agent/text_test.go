package agent

import (
	"encoding/json"
	"testing"
)

// TestInputText checks the text a brain gets of a task's input: a JSON
// string decoded, anything else as it came.
func TestInputText(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"payload"`, "payload"},
		{`""`, ""},
		{`"a\"b"`, `a"b`},
		{`"tab\there"`, "tab\there"},
		{`"\u00e9t\u00e9"`, "été"},
		{`"été"`, "été"},
		{`{"k":"v"}`, `{"k":"v"}`},
		{`42`, `42`},
		{`null`, ""}, // json.Unmarshal leaves the string empty
		{` "spaced" `, "spaced"},
		{`"unterminated`, `"unterminated`},
	} {
		if got := inputText(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("inputText(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// FuzzInputText checks that the fast path for plain strings answers what
// json.Unmarshal does whenever it answers at all.
func FuzzInputText(f *testing.F) {
	for _, s := range []string{`"payload"`, `"a\"b"`, `"\u00e9"`, `"é"`, `"\x7f"`, `{}`, `""`, `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, ok := plainString(raw)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("plainString(%q) = %q, but it is not a JSON string: %v", raw, s, err)
		}
		if s != want {
			t.Fatalf("plainString(%q) = %q, json.Unmarshal gives %q", raw, s, want)
		}
	})
}
