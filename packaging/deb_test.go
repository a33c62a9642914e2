package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/internal/overlayroot"
)

// debFile returns the release's .deb for arch.
func debFile(t *testing.T, arch string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(release(t), "openstarry_*_"+arch+".deb"))
	if len(m) != 1 {
		t.Fatalf("want one %s .deb in the release, have %v", arch, m)
	}
	return m[0]
}

// TestDebContents: every .deb holds what an operator expects, and lintian
// has nothing to say beyond the overrides it ships (each explained in
// packaging/deb/lintian-overrides).
func TestDebContents(t *testing.T) {
	arches := []string{"amd64"}
	if full() {
		arches = []string{"amd64", "arm64", "armhf", "armel"}
	}
	for _, a := range arches {
		t.Run(a, func(t *testing.T) {
			deb := debFile(t, a)
			out, err := run(t, "dpkg-deb", "--contents", deb)
			if err != nil {
				t.Fatalf("dpkg-deb -c: %v\n%s", err, out)
			}
			for _, want := range []string{
				"-rwxr-xr-x root/root .* ./usr/bin/openstarry\n",
				"-rw-r--r-- root/root .* ./lib/systemd/system/openstarry.service\n",
				"-rw-r--r-- root/root .* ./usr/lib/sysusers.d/openstarry.conf\n",
				"-rw-r--r-- root/root .* ./usr/lib/tmpfiles.d/openstarry.conf\n",
				"-rw-r--r-- root/root .* ./etc/openstarry/openstarry.yaml\n",
				"./usr/share/doc/openstarry/copyright\n",
				"./usr/share/doc/openstarry/changelog.gz\n",
				"./usr/share/lintian/overrides/openstarry\n",
			} {
				if !regexpMatch(want, out) {
					t.Errorf("dpkg -c lacks %q:\n%s", want, out)
				}
			}
			info, _ := run(t, "dpkg-deb", "--field", deb, "Architecture", "Version")
			if !strings.Contains(info, "Architecture: "+a+"\n") || !strings.Contains(info, "Version: 1.2.3\n") {
				t.Errorf("control fields:\n%s", info)
			}
			if _, err := exec.LookPath("lintian"); err != nil {
				t.Fatal("lintian is not installed (apt-get install lintian)")
			}
			out, err = run(t, "lintian", "--no-cfg", "--fail-on", "error,warning,info", deb)
			if err != nil {
				t.Errorf("lintian: %v\n%s", err, out)
			}
		})
	}
}

// TestDebInstall installs the amd64 .deb with dpkg into a copy-on-write
// clone of this machine (an overlay of / in private namespaces: a fresh
// root in well under a second, where a debootstrap chroot takes minutes),
// then upgrades, removes and purges it. systemd cannot run as PID 1 here:
// the units are enabled by the real deb-systemd-helper, and
// deb-systemd-invoke and systemctl are recording stand-ins, so that what
// the maintainer scripts ask of systemd is checked.
func TestDebInstall(t *testing.T) {
	deb := debFile(t, "amd64")
	// The upgrade: the same binary packaged as the next version.
	next := t.TempDir()
	copyFile(t, host(t), filepath.Join(next, "openstarry-linux-amd64"))
	cmd := exec.Command("./build.sh", "debs")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "DIST="+next, "DEB_ARCHS=amd64", "DEB_VERSION=1.2.4", "VERSION=v1.2.4")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh debs: %v\n%s", err, out)
	}
	out := overlayroot.Run(t, `
cp "$1" "$R/tmp/v1.deb"; cp "$2" "$R/tmp/v2.deb"
mkdir -p "$R/run/systemd/system"
for c in systemctl deb-systemd-invoke; do
  printf '#!/bin/sh\necho "%s $*" >>/tmp/systemd.calls\n' $c >"$R/usr/local/sbin/$c"
  chmod 755 "$R/usr/local/sbin/$c"
done
chroot "$R" /bin/bash -uo pipefail -c '
calls() { echo "calls: $(grep -v daemon-reload /tmp/systemd.calls | tr "\n" ";")"; : >/tmp/systemd.calls; }
dpkg -i /tmp/v1.deb >/dev/null || exit 1
echo "-- installed"
openstarry version | head -1
echo "user: $(getent passwd openstarry | cut -d: -f1,6,7)"
echo "data: $(stat -c "%U:%G %a" /var/lib/openstarry)"
echo "config: $(stat -c "%U:%G %a" /etc/openstarry/openstarry.yaml) $(grep "^data:" /etc/openstarry/openstarry.yaml)"
echo "conffiles: $(cat /var/lib/dpkg/info/openstarry.conffiles)"
echo "enabled: $(readlink /etc/systemd/system/multi-user.target.wants/openstarry.service)"
calls
su -s /bin/sh openstarry -c "touch /var/lib/openstarry/kept" && echo "the user writes its data"
dpkg -i /tmp/v2.deb >/dev/null || exit 1
echo "-- upgraded"
dpkg-query -W openstarry
calls
dpkg -r openstarry >/dev/null || exit 1
echo "-- removed"
echo "binary: $(ls /usr/bin/openstarry 2>/dev/null | wc -l) data: $(ls /var/lib/openstarry) config: $(ls /etc/openstarry)"
calls
dpkg -P openstarry >/dev/null || exit 1
echo "-- purged"
echo "data: $(ls -d /var/lib/openstarry 2>/dev/null | wc -l) config: $(ls -d /etc/openstarry 2>/dev/null | wc -l) enabled: $(ls /etc/systemd/system/multi-user.target.wants/ 2>/dev/null | grep -c openstarry)"
'
`, deb, filepath.Join(next, "openstarry_1.2.4_amd64.deb"))
	t.Logf("%s", out)
	for _, want := range []string{
		"-- installed\nopenstarry v1.2.3\n",
		"user: openstarry:/var/lib/openstarry:/usr/sbin/nologin\n",
		"data: openstarry:openstarry 750\n",
		"config: root:openstarry 640 data: /var/lib/openstarry\n",
		"conffiles: /etc/openstarry/openstarry.yaml\n",
		"calls: systemctl --root=/ --system --preset-mode=enable-only preset openstarry.service;deb-systemd-invoke start openstarry.service;\n",
		"the user writes its data\n",
		"-- upgraded\nopenstarry\t1.2.4\ncalls: deb-systemd-invoke restart openstarry.service;\n",
		"-- removed\nbinary: 0 data: kept config: openstarry.yaml\ncalls: deb-systemd-invoke stop openstarry.service;\n",
		"-- purged\ndata: 0 config: 0 enabled: 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
