package metrics

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: an agent process links this package for its save
// histogram; it must not pull in the daemon (beyond what the kernel,
// core/agent, imports itself).
func TestDependencies(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))
	}
	kernel := map[string]bool{}
	for _, p := range deps("../agent") {
		kernel[p] = true
	}
	for _, p := range deps(".") {
		if kernel[p] {
			continue
		}
		if strings.Contains(p, "/core/daemon") || strings.Contains(p, "prometheus/client_golang") {
			t.Errorf("core/metrics depends on %s", p)
		}
	}
}
