//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kardianos/service"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/packaging/systemd"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

func defaultServiceData() string { return "/var/lib/openstarry" }
func defaultServiceUser() string { return "openstarry" }

// platformServiceConfig makes systemd install the hardened unit of
// packaging/systemd, with the paths and user of this installation.
func platformServiceConfig(c *service.Config, configPath, data, user string) {
	c.Option["SystemdScript"] = systemdUnit(systemd.Unit, configPath, data, user)
	c.Option["Restart"] = "always"
}

// systemdUnit turns the shipped unit into a kardianos/service template:
// ExecStart becomes the installed binary and its arguments, User and Group
// the given user (both removed for root), ReadWritePaths the data
// directory. ProtectHome is relaxed when a path lives under a home
// directory, which it would otherwise hide.
func systemdUnit(unit, configPath, data, user string) string {
	underHome := func(p string) bool {
		return p != "" && (strings.HasPrefix(p, "/home/") || strings.HasPrefix(p, "/root/") || strings.HasPrefix(p, "/run/user/"))
	}
	var out []string
	for _, line := range strings.Split(unit, "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch key {
		case "ExecStart":
			line = "ExecStart={{Path | cmdEscape}}{{range Arguments}} {{. | cmd}}{{end}}"
		case "User", "Group":
			if user == "" {
				continue
			}
			line = key + "=" + user
		case "ReadWritePaths":
			line = "ReadWritePaths=" + data
		case "ProtectHome":
			switch {
			case underHome(data):
				line = "ProtectHome=no"
			case underHome(configPath):
				line = "ProtectHome=read-only"
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// prepareServiceData creates the data directory, owned by the service's
// user, which must exist.
func prepareServiceData(data, name string) error {
	if strings.ContainsAny(data, " \t\n\"'\\") {
		return fmt.Errorf("data directory %q: systemd paths with spaces or quotes are not supported; choose another", data)
	}
	if name == "" {
		return os.MkdirAll(data, privfs.SharedDirMode)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("user %q: %w; create it first: useradd --system --home-dir %s --shell /usr/sbin/nologin %s", name, err, data, name)
	}
	if err := os.MkdirAll(data, privfs.SharedDirMode); err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(data, uid, gid); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// sysvScript is where kardianos/service installs the SysV init script.
const sysvScript = "/etc/init.d/" + serviceName

// serviceStatus asks the service manager. The SysV script that
// kardianos/service installs answers "Stopped" with exit status 1, which
// the library reports as a bare "exit status 1": read its answer here.
func serviceStatus(s service.Service) (service.Status, error) {
	if service.Platform() != "unix-systemv" {
		return s.Status()
	}
	if _, err := os.Stat(sysvScript); errors.Is(err, os.ErrNotExist) {
		return service.StatusUnknown, service.ErrNotInstalled
	}
	out, err := exec.Command(sysvScript, "status").Output()
	switch answer := strings.TrimSpace(string(out)); {
	case strings.HasPrefix(answer, "Running"):
		return service.StatusRunning, nil
	case strings.HasPrefix(answer, "Stopped"):
		return service.StatusStopped, nil
	default:
		return service.StatusUnknown, fmt.Errorf("%s status: %v: %q", sysvScript, err, answer)
	}
}

// removeServiceLinks removes the runlevel links of the SysV script, which
// kardianos/service creates on install (/etc/rc[2-5].d/S50openstarry,
// /etc/rc[016].d/K02openstarry) but leaves behind on uninstall. Only links
// that point at the script are removed. systemd's links go with
// `systemctl disable`, which the library runs.
func removeServiceLinks() error {
	links, err := filepath.Glob("/etc/rc[0-6S].d/[SK][0-9][0-9]" + serviceName)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		if target, err := os.Readlink(l); err != nil || (target != sysvScript && target != "../init.d/"+serviceName) {
			continue
		}
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serviceLog: under systemd the journal reads stderr.
func serviceLog(cfg *config.Config) (zerolog.Logger, io.Writer, func()) { return stderrLog(cfg) }

// systemdUnitPath is where kardianos/service writes the unit (as root).
const systemdUnitPath = "/etc/systemd/system/" + serviceName + ".service"

// systemdWantsLink is the link `systemctl enable` makes (WantedBy=multi-user.target).
const systemdWantsLink = "/etc/systemd/system/multi-user.target.wants/" + serviceName + ".service"

// chooseInit makes kardianos/service use the service manager named by
// --init: auto (what runs this machine), systemd or sysv. Auto refuses a
// machine where systemd is installed but not running (a container, a
// chroot while building an image): the library would install a SysV
// script there, which is not what the system runs once it boots.
func chooseInit(init string) (note string, err error) {
	want := map[string]string{"systemd": "linux-systemd", "sysv": "unix-systemv"}[init]
	switch {
	case init == "auto":
	case want == "":
		return "", fmt.Errorf("--init %q: want auto, systemd or sysv", init)
	default:
		for _, s := range service.AvailableSystems() {
			if s.String() == want {
				service.ChooseSystem(forcedSystem{s})
				return "", nil
			}
		}
		return "", fmt.Errorf("--init %s: this build of kardianos/service has no %s", init, want)
	}
	if service.ChosenSystem() == nil || service.ChosenSystem().String() != "unix-systemv" {
		return "", nil
	}
	pid1 := "unknown"
	if b, err := os.ReadFile("/proc/1/comm"); err == nil {
		pid1 = strings.TrimSpace(string(b))
	}
	if _, err := exec.LookPath("systemctl"); err == nil {
		return "", exitCode(2, fmt.Errorf("systemd is installed but not running here (PID 1 is %q, no /run/systemd/system), "+
			"so the install would write a SysV init script (%s) instead of a systemd unit; "+
			"run it on the booted system, or say which: --init systemd (the unit, for a system that boots with systemd, "+
			"such as an image being built) or --init sysv", pid1, sysvScript))
	}
	return fmt.Sprintf("systemd is not running here (PID 1 is %q): a SysV init script", pid1), nil
}

// forcedSystem is a service manager chosen by --init: used whether or not
// it runs here.
type forcedSystem struct{ service.System }

func (forcedSystem) Detect() bool { return true }

// planInstall says what install writes with the chosen service manager.
func planInstall(c *service.Config, data, user string) installPlan {
	p := installPlan{Manager: service.Platform(), Command: serviceCommand(c.Arguments), Data: data, User: user}
	switch service.Platform() {
	case "linux-systemd":
		p.Manager = "systemd"
		p.Files = []string{systemdUnitPath, systemdWantsLink}
		var lines []string
		unit, _ := c.Option["SystemdScript"].(string)
		for _, line := range strings.Split(unit, "\n") {
			if strings.HasPrefix(line, "ExecStart=") {
				line = "ExecStart=" + p.Command
			}
			lines = append(lines, line)
		}
		p.Unit = strings.Join(lines, "\n")
	case "unix-systemv":
		p.Manager = "SysV init"
		p.Files = []string{sysvScript}
	}
	return p
}

// removeServiceLinksIfNew removes the SysV runlevel links when the script
// was made by the failed install.
func removeServiceLinksIfNew(made []string) error {
	for _, f := range made {
		if f == sysvScript {
			return removeServiceLinks()
		}
	}
	return nil
}
