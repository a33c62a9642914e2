package tool

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzInsideDir: whatever path a task names, the file tools' resolver
// either refuses it or returns a path inside the artifacts directory.
func FuzzInsideDir(f *testing.F) {
	for _, s := range []string{"tasks.log", "a/b/c.txt", "../x", "a/../../x", "/etc/passwd", "./", "a/./b/../c", "..", "a\x00b", `..\x`} {
		f.Add(s)
	}
	const dir = "/data/agents/a/artifacts"
	f.Fuzz(func(t *testing.T, rel string) {
		p, err := InsideDir(dir, rel)
		if err != nil {
			return
		}
		r, err := filepath.Rel(dir, p)
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
			t.Fatalf("InsideDir(%q) = %q, outside %s", rel, p, dir)
		}
	})
}

// FuzzDecodeArgs: the tools' argument decoder never panics, and what it
// accepts for file_append encodes and decodes to the same arguments.
func FuzzDecodeArgs(f *testing.F) {
	f.Add([]byte(`{"file":"tasks.log","line":"line 1"}`))
	f.Add([]byte(`{"file":"a","line":"x","extra":1}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"ms":5}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var a struct {
			File string `json:"file"`
			Line string `json:"line"`
		}
		if err := DecodeArgs(raw, &a); err != nil {
			return
		}
		again, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var b struct {
			File string `json:"file"`
			Line string `json:"line"`
		}
		if err := DecodeArgs(again, &b); err != nil || a != b {
			t.Fatalf("round trip: %+v → %s → %+v, %v", a, again, b, err)
		}
	})
}
