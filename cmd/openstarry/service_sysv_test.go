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
openstarry service install --data /var/lib/openstarry --user "" --init sysv || exit 1
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

// TestServiceInstallDryRun: install --dry-run prints the service manager,
// the command, the files and (systemd) the unit, and creates nothing; where
// systemd is installed but not running, install does not quietly pick SysV;
// a failed install leaves nothing it made behind (and what was there
// before stays).
func TestServiceInstallDryRun(t *testing.T) {
	out := overlayroot.Run(t, `
cp "$1" "$R/usr/local/bin/openstarry"
chroot "$R" /bin/bash -uo pipefail -c '
left() { ls -d /var/lib/os-dry /var/lib/os-fail /etc/systemd/system/openstarry.service \
  /etc/systemd/system/multi-user.target.wants/openstarry.service /etc/init.d/openstarry /etc/rc?.d/*openstarry 2>/dev/null | wc -l; }
echo "-- dry systemd"; openstarry service install --dry-run --data /var/lib/os-dry --user "" --init systemd; echo "exit=$? left=$(left)"
echo "-- dry sysv"; openstarry service install --dry-run --data /var/lib/os-dry --user "" --init sysv; echo "exit=$? left=$(left)"
echo "-- auto"
if command -v systemctl >/dev/null; then echo "has systemctl"; else echo "no systemctl"; fi
openstarry service install --dry-run --data /var/lib/os-dry --user "" 2>&1; echo "exit=$? left=$(left)"
echo "-- failed systemd"
mkdir -p /etc/systemd/system; echo mine > /etc/systemd/system/openstarry.service
openstarry service install --data /var/lib/os-fail/deep --user "" --init systemd 2>&1; echo "exit=$? left=$(left)"
cat /etc/systemd/system/openstarry.service; rm /etc/systemd/system/openstarry.service
echo "-- failed sysv"
echo mine > /etc/init.d/openstarry
openstarry service install --data /var/lib/os-fail --user "" --init sysv 2>&1; echo "exit=$? left=$(left)"
cat /etc/init.d/openstarry
'
`, binPath)
	t.Logf("%s", out)
	for _, want := range []string{
		"-- dry systemd\ndry run: nothing is written or created\nservice manager: systemd\nruns: /usr/local/bin/openstarry start --data /var/lib/os-dry\n",
		"writes: /etc/systemd/system/openstarry.service\n",
		"\nExecStart=/usr/local/bin/openstarry start --data /var/lib/os-dry\n",
		"ReadWritePaths=/var/lib/os-dry\n",
		"exit=0 left=0\n-- dry sysv\ndry run: nothing is written or created\nservice manager: SysV init\n",
		"writes: /etc/init.d/openstarry\nexit=0 left=0\n",
		"-- failed systemd\nopenstarry: service install (linux-systemd): Failed to install OpenStarry Edge: Init already exists: /etc/systemd/system/openstarry.service\nexit=1 left=1\nmine\n",
		"-- failed sysv\nopenstarry: service install (unix-systemv): Failed to install OpenStarry Edge: Init already exists: /etc/init.d/openstarry\nexit=1 left=1\nmine\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	switch {
	case strings.Contains(out, "-- auto\nhas systemctl\n"):
		if !strings.Contains(out, `systemd is installed but not running here (PID 1 is "bash", no /run/systemd/system)`) ||
			!strings.Contains(out, "--init systemd") || !strings.Contains(out, "exit=2 left=0\n-- failed") {
			t.Error("with systemctl and no systemd running, install did not refuse to pick SysV by itself")
		}
	case !strings.Contains(out, "-- auto\nno systemctl\ndry run: nothing is written or created\nservice manager: SysV init\nnote: systemd is not running here"):
		t.Error("without systemd, the dry run does not say it picks SysV and why")
	}
}
