//go:build linux

package main

import (
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/internal/overlayroot"
)

// TestServiceSysV: on a machine without systemd, the service installs as a
// SysV script with its runlevel links; status exits 3 while it is stopped
// and 0 while it runs; uninstall removes the script and every link.
func TestServiceSysV(t *testing.T) {
	out := overlayroot.Run(t, `
cp "$1" "$R/usr/local/bin/openstarry"
chroot "$R" /bin/bash -uo pipefail -c '
st() { openstarry service status 2>/dev/null; echo "exit=$?"; }
openstarry service install --data /var/lib/openstarry --user "" || exit 1
echo "links: $(ls /etc/rc?.d/ | grep -c openstarry)"
echo "-- stopped"; st
openstarry service start || exit 1
for i in $(seq 100); do openstarry service status >/dev/null && break; sleep 0.1; done
echo "-- started"; st
openstarry service stop || exit 1
for i in $(seq 100); do openstarry service status >/dev/null || break; sleep 0.1; done
echo "-- stopped again"; st
openstarry service uninstall || exit 1
echo "left: $(ls /etc/init.d/openstarry /etc/rc?.d/*openstarry 2>/dev/null | wc -l)"
echo "-- uninstalled"; st
'
`, binPath)
	for _, want := range []string{
		"links: 7",
		"-- stopped\nservice openstarry: stopped\nexit=3",
		"-- started\nservice openstarry: running\nexit=0",
		"-- stopped again\nservice openstarry: stopped\nexit=3",
		"left: 0",
		"-- uninstalled\nservice openstarry: not installed\nexit=3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
