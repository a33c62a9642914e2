package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the binary static and the layers pointing inward:
// no cgo anywhere, and nothing under core/ importing a concrete backend.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .CgoFiles}}CGO{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasSuffix(line, " CGO") && !strings.HasPrefix(line, "runtime/cgo") && !strings.HasPrefix(line, "net ") && !strings.HasPrefix(line, "os/user") {
			t.Errorf("cgo package in the binary: %s", line)
		}
	}
	const mod = "github.com/openstarry/openstarry-edge/"
	core, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../../core/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(core)) {
		if strings.HasPrefix(p, mod+"storage/") || strings.HasPrefix(p, mod+"transport/") || strings.HasPrefix(p, mod+"cmd/") {
			t.Errorf("core/ depends on %s", p)
		}
	}
}
