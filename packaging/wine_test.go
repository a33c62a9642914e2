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
		// The Go runtime (1.24 and later) loads bcryptprimitives.dll for
		// ProcessPrng, its source of random numbers, before main; wine has
		// it from 8.13 on. Debian 12 ships wine 8.0; bookworm-backports has
		// no wine; trixie's wine 10.0 cannot be installed on bookworm
		// without upgrading about 240 packages to trixie (libc6, dpkg,
		// systemd among them), which CI does not do.
		t.Skipf("Debian 12's wine (%s) cannot start Go 1.24+ binaries: no bcryptprimitives.dll (wine 8.13 and later have it):\n%s", wineVersion(wine), out)
	}
	if err != nil || !strings.Contains(out, "platform: windows/amd64\n") || !strings.Contains(out, "stores: bbolt\n") {
		t.Fatalf("wine openstarry.exe version: %v\n%s", err, out)
	}
	roundTrip(t, []string{wine, exe})
}

func wineVersion(wine string) string {
	out, err := exec.Command(wine, "--version").Output()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}
