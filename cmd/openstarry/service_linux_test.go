package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/packaging/systemd"
)

// kardianosExec stands for what kardianos/service renders the ExecStart
// template into.
const kardianosExec = "{{Path | cmdEscape}}{{range Arguments}} {{. | cmd}}{{end}}"

func TestServiceUnit(t *testing.T) {
	unit := systemdUnit(systemd.Unit, "/etc/openstarry/o.yaml", "/srv/openstarry", "svc")
	for _, want := range []string{"\nExecStart=" + kardianosExec + "\n", "\nUser=svc\n", "\nGroup=svc\n",
		"\nReadWritePaths=/srv/openstarry\n", "\nProtectHome=yes\n", "\nNoNewPrivileges=yes\n", "\nProtectSystem=strict\n",
		"\nRestart=always\n", "\nPrivateTmp=yes\n", "\nKillMode=mixed\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("rendered unit lacks %q", strings.TrimSpace(want))
		}
	}
	if strings.Count(unit, "{{") != strings.Count(kardianosExec, "{{") {
		t.Errorf("stray template actions in the unit:\n%s", unit)
	}
	root := systemdUnit(systemd.Unit, "", "/home/op/data", "")
	if strings.Contains(root, "\nUser=") || strings.Contains(root, "\nGroup=") || !strings.Contains(root, "\nProtectHome=no\n") {
		t.Errorf("root install under /home:\n%s", root)
	}
	if cfg := systemdUnit(systemd.Unit, "/root/o.yaml", "/var/lib/openstarry", "x"); !strings.Contains(cfg, "\nProtectHome=read-only\n") {
		t.Error("a config under /root needs ProtectHome=read-only")
	}
	if err := prepareServiceData("/tmp/with space", ""); err == nil {
		t.Error("a data directory with a space was accepted")
	}
}

// TestServiceUnitVerify: systemd-analyze verify accepts the shipped unit
// and the one service install renders (with the real binary in ExecStart).
func TestServiceUnitVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	dir := t.TempDir()
	shipped := strings.Replace(systemd.Unit, "ExecStart=/usr/bin/openstarry ", "ExecStart="+binPath+" ", 1)
	rendered := strings.Replace(systemdUnit(systemd.Unit, "/etc/openstarry/o.yaml", "/var/lib/openstarry", "openstarry"),
		kardianosExec, binPath+" start --config /etc/openstarry/o.yaml --data /var/lib/openstarry", 1)
	for name, unit := range map[string]string{"shipped": shipped, "rendered": rendered} {
		path := filepath.Join(dir, name, "openstarry.service")
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}
