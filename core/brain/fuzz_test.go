package brain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseScript feeds the echo brain's script reader arbitrary task
// inputs: it never panics, a script it accepts names a tool in every call,
// and the script written back as JSON reads the same again.
func FuzzParseScript(f *testing.F) {
	f.Add([]byte(`{"call":[{"tool":"file_append","args":{"file":"a","line":"x"}}]}`))
	f.Add([]byte(`{"call":[]}`))
	f.Add([]byte(`{"call":[{"tool":""}]}`))
	f.Add([]byte(`{"call":null,"other":1}`))
	f.Add([]byte(`"plain text"`))
	f.Add([]byte(`  {"call":[{"tool":"sleep_ms","args":{"ms":5}},{"tool":"x"}]}  `))
	f.Fuzz(func(t *testing.T, input []byte) {
		s, isScript, err := parseScript(input)
		if err != nil || !isScript {
			return
		}
		for i, c := range s.Call {
			if c.Tool == "" {
				t.Fatalf("call %d accepted without a tool", i)
			}
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, isScript, err := parseScript(again)
		if err != nil || !isScript {
			t.Fatalf("the script written back (%s) does not read: %v", again, err)
		}
		for i := range s.Call {
			// Args are compared as compact JSON: the reader keeps them raw.
			var a, b bytes.Buffer
			_ = json.Compact(&a, s.Call[i].Args)
			_ = json.Compact(&b, s2.Call[i].Args)
			s.Call[i].Args, s2.Call[i].Args = a.Bytes(), b.Bytes()
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the script: %+v, %+v", s, s2)
		}
	})
}
