package main

import (
	"os"
	"os/exec"
	"slices"
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
		// A JSON Schema library compiles its meta-schemas at start-up, in
		// every process: core/design interprets the template schema itself.
		if strings.HasPrefix(line, "github.com/santhosh-tekuri/jsonschema") {
			t.Errorf("the JSON Schema library is in the binary: %s", line)
		}
		// The browser driver of the web UI's tests stays in the tests.
		if strings.HasPrefix(line, "github.com/chromedp/") {
			t.Errorf("the browser driver is in the binary: %s", line)
		}
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

// TestKernelDependencies keeps the kernel pure: core/agent, transitively,
// links no HTTP stack and nothing of the daemon. Tools that talk to the
// network register themselves from their own packages; the host hands the
// kernel the resolved tools.
func TestKernelDependencies(t *testing.T) {
	const mod = "github.com/openstarry/openstarry-edge/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../../core/agent").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, mod+"core/agent") || !slices.Contains(deps, mod+"core/tool") {
		t.Fatalf("go list -deps core/agent listed %d packages, without core/agent or core/tool: %v", len(deps), deps)
	}
	for _, p := range deps {
		if p == "net/http" || strings.HasPrefix(p, "net/http/") {
			t.Errorf("core/agent depends on %s", p)
		}
		if p == mod+"core/daemon" || strings.HasPrefix(p, mod+"core/daemon/") {
			t.Errorf("core/agent depends on %s", p)
		}
	}
}

// TestOtherPlatforms type-checks every package, tests included, for Windows
// (the service, the control API on loopback, the stdin pipe that stops an
// agent: code that never runs here) and builds the binary for 32-bit ARM.
func TestOtherPlatforms(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles")
	}
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{[]string{"GOOS=windows", "GOARCH=amd64"}, []string{"vet", "../../..."}},
		{[]string{"GOOS=windows", "GOARCH=arm64"}, []string{"build", "-o", os.DevNull, "."}},
		{[]string{"GOOS=linux", "GOARCH=arm", "GOARM=6"}, []string{"build", "-o", os.DevNull, "."}},
	} {
		cmd := exec.Command("go", tc.args...)
		cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), tc.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s go %s: %v\n%s", strings.Join(tc.env, " "), strings.Join(tc.args, " "), err, out)
		}
	}
}
