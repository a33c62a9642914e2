package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, name string, env Env, args string) (map[string]any, error) {
	t.Helper()
	tl, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tl.Run(context.Background(), env, json.RawMessage(args))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s output %s: %v", name, out, err)
	}
	return m, nil
}

func TestFileWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	env := Env{ArtifactsDir: dir, TaskID: "t1"}
	if _, err := run(t, "file_write", env, `{"path":"notes/a.txt","content":"héllo world"}`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "notes")} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want a 0700 directory", p, st.Mode(), err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "notes", "a.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v %v, want 0600", st.Mode(), err)
	}
	m, err := run(t, "file_read", env, `{"path":"notes/a.txt"}`)
	if err != nil || m["content"] != "héllo world" || m["eof"] != true {
		t.Fatalf("read = %v, %v", m, err)
	}
	m, err = run(t, "file_read", env, `{"path":"notes/a.txt","offset":7,"max_bytes":3}`)
	if err != nil || m["content"] != "wor" || m["eof"] != false {
		t.Fatalf("read part = %v, %v", m, err)
	}
	// A cut inside a rune is moved back to the rune's start.
	m, err = run(t, "file_read", env, `{"path":"notes/a.txt","max_bytes":2}`)
	if err != nil || m["content"] != "h" {
		t.Fatalf("read cut = %v, %v", m, err)
	}
	// Rewriting replaces, and leaves no temporary file.
	if _, err := run(t, "file_write", env, `{"path":"notes/a.txt","content":"second"}`); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "notes"))
	if len(entries) != 1 {
		t.Fatalf("notes/ holds %v", entries)
	}
}

// Every way out of the artifacts directory is refused with an error the
// model can read, symbolic links included (os.Root).
func TestFileToolsConfined(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "artifacts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	env := Env{ArtifactsDir: dir}
	cases := []struct{ tool, args, want string }{
		{"file_read", `{"path":"../secret.txt"}`, "leaves the artifacts directory"},
		{"file_read", `{"path":"/etc/passwd"}`, "must be relative"},
		{"file_read", `{"path":"link.txt"}`, "link.txt"},
		{"file_read", `{"path":"up/secret.txt"}`, "up/secret.txt"},
		{"file_read", `{"path":""}`, "path is empty"},
		{"file_read", `{"path":"missing.txt"}`, "no such file"},
		{"file_read", `{"path":"a","max_bytes":999999999}`, "max_bytes"},
		{"file_read", `{"file":"a"}`, "bad arguments"},
		{"file_write", `{"path":"up/evil.txt","content":"x"}`, "up/evil.txt"},
		{"file_write", `{"path":"../evil.txt","content":"x"}`, "leaves"},
		{"file_write", `{"path":"a.txt"}`, "bad arguments"},
		{"file_write", `{"path":"a.txt","content":7}`, "bad arguments"},
	}
	for _, tc := range cases {
		_, err := run(t, tc.tool, env, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want it to mention %q", tc.tool, tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), base) {
			t.Errorf("%s %s: the error shows the absolute path: %v", tc.tool, tc.args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "evil.txt")); !os.IsNotExist(err) {
		t.Fatalf("a file was written outside: %v", err)
	}
}
