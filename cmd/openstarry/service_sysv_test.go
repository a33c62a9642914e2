//go:build linux

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// overlayRoot runs script as root in a copy-on-write clone of this
// machine: private mount, network and PID namespaces, an overlay of / whose
// writes land on a tmpfs and vanish with the namespaces. In the script,
// $R is the clone's root (run commands there with chroot "$R"); the
// clone has a fresh /proc (so /proc/1 is not systemd), an empty /run and
// /tmp, and the loopback interface up. The namespaces end with the script,
// and every process started in them with it. It skips when the kernel or
// the privileges do not allow it.
func overlayRoot(t *testing.T, script string, args ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount namespaces and overlayfs")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is not installed")
	}
	setup := `set -euo pipefail
T=$(mktemp -d)
mount -t tmpfs tmpfs "$T"
mkdir "$T/u" "$T/w" "$T/r"
mount -t overlay overlay -o lowerdir=/,upperdir="$T/u",workdir="$T/w" "$T/r"
R="$T/r"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
ip link set lo up
`
	probe := exec.Command("unshare", "--mount", "--net", "--pid", "--fork", "--propagation", "private", "bash", "-c",
		`set -e; T=$(mktemp -d); mount -t tmpfs tmpfs "$T"; mkdir "$T/u" "$T/w" "$T/r"; mount -t overlay overlay -o lowerdir=/,upperdir="$T/u",workdir="$T/w" "$T/r"`)
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("this kernel or container does not allow a mount namespace with an overlay of /: %v\n%s", err, out)
	}
	cmd := exec.Command("unshare", append([]string{"--mount", "--net", "--pid", "--fork", "--propagation", "private",
		"bash", "-c", setup + script, "overlayroot"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script in the overlay root: %v\n%s", err, out)
	}
	return string(out)
}

// TestServiceSysV: on a machine without systemd, the service installs as a
// SysV script with its runlevel links; status exits 3 while it is stopped
// and 0 while it runs; uninstall removes the script and every link.
func TestServiceSysV(t *testing.T) {
	out := overlayRoot(t, `
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
