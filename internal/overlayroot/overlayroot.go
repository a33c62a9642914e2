// Package overlayroot runs a test's shell script as root in a
// copy-on-write clone of this machine, so that installing a service or a
// package leaves nothing behind.
//
// The clone lives in private mount, network and PID namespaces: an overlay
// of / whose writes land on a tmpfs and vanish with the namespaces. In the
// script, $R is the clone's root (run commands there with chroot "$R"); the
// clone has a fresh /proc (so /proc/1 is not systemd), an empty /run and
// /tmp, and the loopback interface up. The namespaces end with the script,
// and every process started in them with it.
package overlayroot

import (
	"os"
	"os/exec"
	"testing"
)

// setup makes the clone and sets $R; the script runs after it.
const setup = `set -euo pipefail
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

// Run runs script with bash in a clone of this machine, with args as $1…,
// and returns its combined output; a failing script fails t. It skips t
// when it does not run as root or when the kernel or the container does
// not allow the namespaces and the overlay; unshare (util-linux) missing
// fails t.
func Run(t testing.TB, script string, args ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount namespaces and overlayfs")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is not installed")
	}
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
