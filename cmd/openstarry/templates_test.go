package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
)

// runCmd executes a fresh command tree and returns stdout, stderr and the
// exit code execute would return.
func runCmd(t *testing.T, cmd *cobra.Command, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SilenceErrors = true
	cmd.SilenceUsage = true
	err := cmd.Execute()
	if err != nil {
		code = 1
		var ee *exitcode.Error
		if errors.As(err, &ee) {
			code = ee.Code
		}
		errb.WriteString(err.Error() + "\n")
	}
	return out.String(), errb.String(), code
}

func TestTemplatesValidateBroken(t *testing.T) {
	root := filepath.Join("..", "..", "core", "design")
	out, stderr, code := runCmd(t, newTemplatesCmd(), "validate", filepath.Join(root, "testdata", "broken"))
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	golden, err := os.ReadFile(filepath.Join(root, "testdata", "broken.golden"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(filepath.ToSlash(out), "../../core/design/", "")
	if got != string(golden) {
		t.Errorf("output differs from core/design/testdata/broken.golden:\n%s", got)
	}
	if !strings.Contains(stderr, "23 errors in 10 of 10 templates") {
		t.Errorf("stderr %q", stderr)
	}
}

func TestTemplatesKeygenSignValidate(t *testing.T) {
	dir := t.TempDir()
	tdir := filepath.Join(dir, "templates")
	os.Mkdir(tdir, 0o755)
	copyShipped(t, tdir, "master.json", "worker.json", "echo.json")
	prefix := filepath.Join(dir, "fleet")

	out, stderr, code := runCmd(t, newTemplatesCmd(), "keygen", "--out", prefix)
	if code != 0 || !strings.Contains(out, "key id: ") {
		t.Fatalf("keygen: exit %d %s%s", code, out, stderr)
	}
	if _, stderr, code := runCmd(t, newTemplatesCmd(), "keygen", "--out", prefix); code != 1 || !strings.Contains(stderr, "exists") {
		t.Fatalf("keygen over existing keys: exit %d %s", code, stderr)
	}

	// Unsigned templates fail a validation that requires signatures.
	out, stderr, code = runCmd(t, newTemplatesCmd(), "validate", "--trusted-key", prefix+".pub", tdir)
	if code != 1 || strings.Count(out, ": /: signature: no ") != 3 {
		t.Fatalf("unsigned: exit %d\n%s", code, out)
	}
	// Three templates, each counted once though valid and unsigned.
	if !strings.Contains(stderr, "3 errors in 3 of 3 templates") {
		t.Fatalf("unsigned: count: %s", stderr)
	}

	args := []string{"sign", "--key", prefix + ".key"}
	for _, n := range []string{"master.json", "worker.json", "echo.json"} {
		args = append(args, filepath.Join(tdir, n))
	}
	if out, stderr, code := runCmd(t, newTemplatesCmd(), args...); code != 0 || strings.Count(out, "signed ") != 3 {
		t.Fatalf("sign: exit %d %s%s", code, out, stderr)
	}
	sig, _ := os.ReadFile(filepath.Join(tdir, "master.json.sig"))
	if !strings.HasPrefix(string(sig), "ed25519:") {
		t.Fatalf("sig file %q", sig)
	}
	pub, _ := os.ReadFile(prefix + ".pub")
	for _, key := range []string{prefix + ".pub", strings.TrimSpace(string(pub))} {
		if out, _, code := runCmd(t, newTemplatesCmd(), "validate", "--trusted-key", key, tdir); code != 0 || out != "3 templates valid\n" {
			t.Fatalf("signed, key %s: exit %d\n%s", key, code, out)
		}
	}

	// One byte changed after signing.
	p := filepath.Join(tdir, "worker.json")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(data, []byte("worker agent"), []byte("Worker agent"), 1), 0o644)
	out, _, code = runCmd(t, newTemplatesCmd(), "validate", "--trusted-key", prefix+".pub", tdir)
	if code != 1 || !strings.Contains(out, "worker.json: /: signature: bad template signature: the signature does not match") {
		t.Fatalf("tampered: exit %d\n%s", code, out)
	}

	// An invalid template is not signed.
	os.WriteFile(filepath.Join(tdir, "broken.json"), []byte("{"), 0o644)
	if _, stderr, code := runCmd(t, newTemplatesCmd(), "sign", "--key", prefix+".key", filepath.Join(tdir, "broken.json")); code != 1 || !strings.Contains(stderr, "refusing to sign") {
		t.Fatalf("sign broken: exit %d %s", code, stderr)
	}
}

func copyShipped(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("..", "..", "configs", "templates", n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
