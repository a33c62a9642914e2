package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/design"
)

// TestCoreChecksBlueprintDigest: an agent process refuses a blueprint whose
// bytes are not those the daemon froze (and validated), before it opens
// anything.
func TestCoreChecksBlueprintDigest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "templates", "echo.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bp := filepath.Join(dir, "echo.json")
	if err := os.WriteFile(bp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "core", "--agent", "d1", "--data", filepath.Join(dir, "data"), "--template", bp,
		"--template-digest", design.Digest(append(raw, '\n')), "--no-mqtt")
	if code == 0 || !strings.Contains(out, "blueprint digest mismatch") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
