package packaging

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWine runs the windows/amd64 build under Debian's wine: version, then
// an agent with the embedded broker answering a task over HTTP (bbolt on
// LockFileEx and a Windows memory map, the loopback listener).
func TestWine(t *testing.T) {
	exe := filepath.Join(release(t), "openstarry-small-windows-amd64.exe")
	wine, err := exec.LookPath("wine")
	if err != nil {
		t.Fatal("wine is not installed (apt-get install wine wine64)")
	}
	prefix := t.TempDir()
	t.Setenv("WINEPREFIX", prefix)
	t.Setenv("WINEDEBUG", "-all")
	t.Setenv("WINEDLLOVERRIDES", "mscoree,mshtml=") // no Mono or Gecko prompt
	t.Cleanup(func() { exec.Command("wineserver", "-k").Run() })
	out, err := run(t, wine, exe, "version")
	if strings.Contains(out, "bcryptprimitives.dll not found") {
		// Debian 12's wine 8.0 lacks bcryptprimitives.dll, which the Go
		// runtime (1.24 and later) loads for its random numbers at start.
		t.Skipf("this wine cannot start Go 1.24+ binaries (no bcryptprimitives.dll):\n%s", out)
	}
	if err != nil || !strings.Contains(out, "platform: windows/amd64\n") || !strings.Contains(out, "stores: bbolt\n") {
		t.Fatalf("wine openstarry.exe version: %v\n%s", err, out)
	}
	roundTrip(t, []string{wine, exe})
}
