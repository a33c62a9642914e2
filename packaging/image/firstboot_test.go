package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/enroll"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// hostBin is openstarry built for this machine, once per test binary.
var hostBin string

// openstarryBinary builds it on first use.
func openstarryBinary(t *testing.T) string {
	t.Helper()
	if hostBin != "" {
		return hostBin
	}
	dir, err := os.MkdirTemp("", "openstarry-image-test-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "openstarry")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/openstarry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	hostBin = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if hostBin != "" {
		os.RemoveAll(filepath.Dir(hostBin))
	}
	os.Exit(code)
}

// card is a copy of what first boot sees: the boot partition, /etc/openstarry
// with the package's configuration, the data directory, /etc/hostname and
// the board's ids under sys.
type card struct {
	boot, etc, data, hostname, sys, cadir string
}

func newCard(t *testing.T, serial string) *card {
	t.Helper()
	d := t.TempDir()
	c := &card{boot: filepath.Join(d, "boot"), etc: filepath.Join(d, "etc"), data: filepath.Join(d, "data"),
		hostname: filepath.Join(d, "hostname"), sys: filepath.Join(d, "sys"), cadir: filepath.Join(d, "ca")}
	for _, p := range []string{c.boot, c.etc, c.data, c.cadir, filepath.Join(c.sys, "proc/device-tree"), filepath.Join(c.sys, "etc")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(c.etc, "openstarry.yaml"), "# the package's\ndata: /var/lib/openstarry\n")
	write(t, c.hostname, "openstarry\n")
	write(t, filepath.Join(c.sys, "etc/machine-id"), "0123456789abcdef0123456789abcdef\n")
	if serial != "" {
		write(t, filepath.Join(c.sys, "proc/device-tree/serial-number"), serial+"\x00")
	}
	return c
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// run runs files/usr/lib/openstarry/firstboot on the card; it must exit 0
// whatever it finds.
func (c *card) run(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sh", "files/usr/lib/openstarry/firstboot")
	cmd.Env = append(os.Environ(), "FIRSTBOOT_BOOT="+c.boot, "FIRSTBOOT_ETC="+c.etc, "FIRSTBOOT_DATA="+c.data,
		"FIRSTBOOT_BIN="+openstarryBinary(t), "FIRSTBOOT_HOSTNAME="+c.hostname, "FIRSTBOOT_SYS="+c.sys,
		"FIRSTBOOT_CADIR="+c.cadir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("firstboot failed (it must never fail the boot): %v\n%s", err, out)
	}
	return string(out)
}

// TestFirstBoot runs the image's first-boot script on copies of a card:
// a valid openstarry.yaml is applied once; a wrong one is not, and is
// reported in openstarry-firstboot.log on the boot partition and in
// DATA/boot-notice (the daemon's status), the previous configuration
// kept; the host name comes from the board's serial number, else the
// machine id; an enrolment file without a token, or whose hub does not
// answer, is reported and kept; a CA file that is no PEM is refused.
func TestFirstBoot(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum is missing")
	}
	const good = "data: /var/lib/openstarry\nmqtt:\n  broker: tcp://10.0.2.2:18830\n  device: dev-7\n"
	const bad = "data: /var/lib/openstarry\nmqtt:\n  brokr: tcp://10.0.2.2:18830\n"

	t.Run("valid", func(t *testing.T) {
		c := newCard(t, "00000000a1b2c3d4")
		write(t, filepath.Join(c.boot, "openstarry.yaml"), good)
		out := c.run(t)
		if got := read(t, filepath.Join(c.etc, "openstarry.yaml")); got != good {
			t.Fatalf("/etc/openstarry/openstarry.yaml is %q, want the boot partition's\n%s", got, out)
		}
		if got := strings.TrimSpace(read(t, c.hostname)); got != "openstarry-a1b2c3d4" {
			t.Errorf("host name %q, want openstarry-a1b2c3d4 (the serial number)", got)
		}
		if n := read(t, filepath.Join(c.data, "boot-notice")); n != "" {
			t.Errorf("boot-notice after a good boot: %q", n)
		}
		log := read(t, filepath.Join(c.boot, "openstarry-firstboot.log"))
		for _, want := range []string{"host name openstarry-a1b2c3d4, from the board's serial number", "applied openstarry.yaml from the boot partition"} {
			if !strings.Contains(log, want) {
				t.Errorf("openstarry-firstboot.log lacks %q:\n%s", want, log)
			}
		}
		// The next boot: nothing changed, nothing done; the name stays.
		c.run(t)
		log = read(t, filepath.Join(c.boot, "openstarry-firstboot.log"))
		if !strings.Contains(log, "openstarry.yaml unchanged since it was applied") || strings.Count(log, "host name") != 1 {
			t.Errorf("second boot:\n%s", log)
		}
	})

	t.Run("wrong config", func(t *testing.T) {
		c := newCard(t, "")
		write(t, filepath.Join(c.boot, "openstarry.yaml"), bad)
		c.run(t)
		if got := read(t, filepath.Join(c.etc, "openstarry.yaml")); !strings.HasPrefix(got, "# the package's") {
			t.Fatalf("a wrong configuration was applied: %q", got)
		}
		notice := read(t, filepath.Join(c.data, "boot-notice"))
		log := read(t, filepath.Join(c.boot, "openstarry-firstboot.log"))
		for name, s := range map[string]string{"boot-notice": notice, "openstarry-firstboot.log": log} {
			if !strings.Contains(s, "openstarry.yaml on the boot partition is not valid") || !strings.Contains(s, `unknown key "mqtt.brokr"`) {
				t.Errorf("%s does not say why: %q", name, s)
			}
		}
		if got := strings.TrimSpace(read(t, c.hostname)); got != "openstarry-0123456789ab" {
			t.Errorf("host name %q, want openstarry-0123456789ab (the machine id)", got)
		}
		// Fixed on the card: applied, and the notice goes.
		write(t, filepath.Join(c.boot, "openstarry.yaml"), good)
		c.run(t)
		if read(t, filepath.Join(c.etc, "openstarry.yaml")) != good || read(t, filepath.Join(c.data, "boot-notice")) != "" {
			t.Errorf("the corrected configuration was not applied, or the notice stayed")
		}
	})

	t.Run("enrolment", func(t *testing.T) {
		c := newCard(t, "")
		enr := filepath.Join(c.boot, "openstarry-enroll.txt")
		write(t, enr, "hub=https://hub.example\n")
		c.run(t)
		if n := read(t, filepath.Join(c.data, "boot-notice")); !strings.Contains(n, "needs a hub=URL line and a token=TOKEN line") {
			t.Errorf("boot-notice %q", n)
		}
		// A hub that does not answer: reported, the token kept for the
		// next boot.
		write(t, enr, "hub=http://127.0.0.1:"+strconv.Itoa(loopback.FreePort(t))+"\r\ntoken=abc\r\n")
		c.run(t)
		if n := read(t, filepath.Join(c.data, "boot-notice")); !strings.Contains(n, "enrolment with http://127.0.0.1:") {
			t.Errorf("boot-notice %q", n)
		}
		if read(t, enr) == "" {
			t.Errorf("the enrolment file was removed though the enrolment failed")
		}
	})

	// A hub that answers: `openstarry hub serve` on a Mosquitto with
	// dynamic security, a one-use token on the card. The device enrols as
	// its own device id, the file is removed (its token is spent), no
	// notice is left, and the data directory holds the credentials the hub
	// made (the daemon reads them at start).
	t.Run("enrolment with a hub", func(t *testing.T) {
		dir := t.TempDir()
		m := mqtttest.StartMosquitto(t, mqtttest.Options{DynSec: mqtttest.InitDynSec(t, dir, "hub-admin", "admin-secret")})
		bin := openstarryBinary(t)
		state := filepath.Join(dir, "hub")
		var logs logbuf.Buffer
		hub := exec.Command(bin, "hub", "serve", "--state", state, "--broker", m.URL(), "--admin-user", "hub-admin", "--listen", "127.0.0.1:0")
		hub.Env = append(os.Environ(), "OPENSTARRY_HUB_ADMIN_PASSWORD=admin-secret")
		hub.Stdout, hub.Stderr = &logs, &logs
		if err := hub.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hub.Process.Kill(); _ = hub.Wait() })
		listen := regexp.MustCompile(`enrolment listening on (http://[0-9.:]+)`)
		var hubURL string
		wait.For(t, 20*time.Second, "the hub listening", func() bool {
			if mm := listen.FindStringSubmatch(logs.String()); mm != nil {
				hubURL = mm[1]
			}
			return hubURL != ""
		})
		tok, err := exec.Command(bin, "hub", "token", "--state", state, "--device", "pi-card").CombinedOutput()
		if err != nil {
			t.Fatalf("hub token: %v\n%s", err, tok)
		}
		c := newCard(t, "")
		enr := filepath.Join(c.boot, "openstarry-enroll.txt")
		write(t, enr, "hub="+hubURL+"\ntoken="+strings.TrimSpace(string(tok))+"\n")
		out := c.run(t)
		if _, err := os.Stat(enr); !os.IsNotExist(err) {
			t.Fatalf("the enrolment file is still there (%v)\n%s\nhub:\n%s", err, out, logs.String())
		}
		if n := read(t, filepath.Join(c.data, "boot-notice")); n != "" {
			t.Errorf("boot-notice after a good enrolment: %q", n)
		}
		cred, err := enroll.ReadCredentials(enroll.Dir(c.data))
		if err != nil || cred == nil || cred.Device != "pi-card" || cred.Broker != m.URL() || cred.Password == "" {
			t.Errorf("the credentials in the data directory: %+v, %v", cred, err)
		}
		if log := read(t, filepath.Join(c.boot, "openstarry-firstboot.log")); !strings.Contains(log, "enrolled as device pi-card") {
			t.Errorf("openstarry-firstboot.log does not say the device enrolled:\n%s", log)
		}
	})

	t.Run("hub CA", func(t *testing.T) {
		c := newCard(t, "")
		write(t, filepath.Join(c.boot, "openstarry-hub-ca.pem"), "not a certificate\n")
		c.run(t)
		if n := read(t, filepath.Join(c.data, "boot-notice")); !strings.Contains(n, "holds no PEM certificate") {
			t.Errorf("boot-notice %q", n)
		}
		if _, err := os.Stat(filepath.Join(c.cadir, "openstarry-hub.crt")); err == nil {
			t.Errorf("a file that is no certificate was trusted")
		}
	})
}
