package jsonclip

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	long := `{"previous_state":"` + strings.Repeat("é", 3000) + `","remaining_tasks":[` +
		strings.TrimSuffix(strings.Repeat(`{"task_id":"task_p1_a_001","status":"pending"},`, 500), ",") + `]}`
	for _, tc := range []struct {
		name, in string
		max      int
		cut      bool
		want     string // "" when only validity and size are checked
	}{
		{"fits, compacted", `{ "a" : [1, 2] }`, 100, false, `{"a":[1,2]}`},
		{"long object", long, 8 << 10, true, ""},
		{"long object, tiny", long, 20, true, `{"truncated":true}`},
		{"too small for anything", long, 5, true, "null"},
		{"not JSON", strings.Repeat("x", 100), 40, true, ""},
		{"string", `"` + strings.Repeat("ab", 100) + `"`, 30, true, ""},
		{"numbers stay exact", `{"n":12345678901234567890}`, 100, false, `{"n":12345678901234567890}`},
	} {
		out, cut := Clip([]byte(tc.in), tc.max)
		if cut != tc.cut || len(out) > tc.max || !json.Valid(out) || tc.want != "" && string(out) != tc.want {
			t.Errorf("%s: %d bytes, cut %v, valid %v: %.200s", tc.name, len(out), cut, json.Valid(out), out)
		}
	}
	// What was cut keeps the structure and says so.
	out, _ := Clip([]byte(long), 8<<10)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil || m[Marker] != true || len(m["remaining_tasks"].([]any)) == 0 {
		t.Fatalf("%v: %.300s", err, out)
	}
}

func FuzzClip(f *testing.F) {
	f.Add([]byte(`{"a":[1,2,3],"b":"xyz"}`), 10)
	f.Add([]byte(`[[[[]]]]`), 3)
	f.Add([]byte("\xff\xfe"), 8)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		out, _ := Clip(data, max)
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, data)
		}
		if len(out) > max && string(out) != "null" {
			t.Fatalf("%d bytes > %d: %q", len(out), max, out)
		}
	})
}
