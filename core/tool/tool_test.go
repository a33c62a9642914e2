package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInsideDir(t *testing.T) {
	cases := []struct {
		rel string
		ok  bool
	}{
		{"a.txt", true},
		{"sub/a.txt", true},
		{"sub/../a.txt", true},
		{"", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"sub/../../x", false},
		{"..", false},
		{"a\x00b", false},
	}
	for _, tc := range cases {
		got, err := InsideDir("/base", tc.rel)
		if (err == nil) != tc.ok {
			t.Errorf("InsideDir(%q) = %q, %v; want ok=%v", tc.rel, got, err, tc.ok)
		}
		if err == nil && !strings.HasPrefix(got, "/base/") {
			t.Errorf("InsideDir(%q) = %q escapes", tc.rel, got)
		}
	}
}

func TestBuiltins(t *testing.T) {
	dir := t.TempDir()
	env := Env{AgentID: "a", ArtifactsDir: dir}
	fa, err := Lookup("file_append")
	if err != nil || fa.Idempotent {
		t.Fatalf("file_append: %v idempotent=%v", err, fa.Idempotent)
	}
	for _, line := range []string{"one", "two"} {
		if _, err := fa.Run(context.Background(), env, json.RawMessage(`{"file":"d/log.txt","line":"`+line+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "d", "log.txt"))
	if string(data) != "one\ntwo\n" {
		t.Fatalf("file = %q", data)
	}
	bad := []string{`{"file":"x","line":"a\nb"}`, `{"file":"../x","line":"a"}`, `{"file":"x","line":"a","extra":1}`, `[]`}
	for _, args := range bad {
		if _, err := fa.Run(context.Background(), env, json.RawMessage(args)); err == nil {
			t.Errorf("file_append(%s) accepted", args)
		}
	}
	sl, _ := Lookup("sleep_ms")
	if !sl.Idempotent {
		t.Fatal("sleep_ms must be idempotent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := sl.Run(ctx, env, json.RawMessage(`{"ms":5000}`)); err == nil {
		t.Fatal("sleep_ms ignored its context")
	}
	if _, err := sl.Run(context.Background(), env, json.RawMessage(`{"ms":-1}`)); err == nil {
		t.Fatal("negative sleep accepted")
	}
	if _, err := Lookup("nope"); err == nil {
		t.Fatal("unknown tool found")
	}
}
