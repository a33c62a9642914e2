//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/enroll"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// startHub starts a Mosquitto with dynamic security (admin hub-admin,
// password admin-secret) and `openstarry hub serve` on it, its state in
// dir/hub; it returns the broker, the state directory and the enrolment
// URL, and the hub's process (its log).
func startHub(t *testing.T, dir string) (m *mqtttest.Mosquitto, state, hubURL string, h *child) {
	t.Helper()
	m = mqtttest.StartMosquitto(t, mqtttest.Options{DynSec: mqtttest.InitDynSec(t, dir, "hub-admin", "admin-secret")})
	state = filepath.Join(dir, "hub")
	h = startChildCmd(t, exec.Command("env", "OPENSTARRY_HUB_ADMIN_PASSWORD=admin-secret",
		binPath, "hub", "serve", "--state", state, "--broker", m.URL(), "--admin-user", "hub-admin", "--listen", "127.0.0.1:0"))
	h.waitLog("enrolment listening on", 10*time.Second)
	return m, state, hubListenRe.FindStringSubmatch(h.logs())[1], h
}

var hubListenRe = regexp.MustCompile(`enrolment listening on (http://[0-9.:]+)`)

// TestEnrollCLI: `openstarry hub serve` against a real Mosquitto with the
// dynamic security plugin, `openstarry hub token`, then `openstarry enroll`
// on a fresh device: its key and credentials are written 0600, and the
// daemon started on that data directory logs in to the broker as the
// enrolled device with no MQTT configuration of its own. Enrolling again
// rotates the password: the broker refuses the old one, the new one works,
// and a spent token is refused.
func TestEnrollCLI(t *testing.T) {
	dir := t.TempDir()
	m, state, hubURL, h := startHub(t, dir)

	token := func(args ...string) string {
		out, code := runCLI(t, append([]string{"hub", "token", "--state", state}, args...)...)
		if code != 0 || !strings.HasPrefix(out, "ost_") {
			t.Fatalf("hub token: %d %s", code, out)
		}
		return strings.TrimSpace(out)
	}
	data := dataDir(t)
	cfg := daemonConfig(t, data, "mqtt:\n  telemetry_interval: 1s\n")
	t1 := token("--device", "pi-enrolled")
	out, code := runCLI(t, "enroll", "--config", cfg, "--hub", hubURL, "--token", t1)
	if code != 0 || !strings.Contains(out, "enrolled as device pi-enrolled on "+m.URL()) {
		t.Fatalf("enroll: %d\n%s\n%s", code, out, h.logs())
	}
	edir := enroll.Dir(data)
	for _, f := range []string{enroll.KeyFile, enroll.PubFile, enroll.CredentialsFile} {
		fi, err := os.Stat(filepath.Join(edir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	if fi, _ := os.Stat(edir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: mode %v", edir, fi.Mode())
	}
	c1, err := enroll.ReadCredentials(edir)
	if err != nil {
		t.Fatal(err)
	}

	// The daemon logs in with the enrolled credentials.
	watch := mqtttest.CollectAs(t, m.URL(), "enroll-watch", "hub-admin", "admin-secret", true, "openstarry/+/status")
	d := startDaemon(t, cfg)
	d.waitLog("mqtt: connected to "+m.URL(), 10*time.Second)
	wait.For(t, 10*time.Second, "pi-enrolled online", func() bool {
		for _, msg := range watch.Messages("openstarry/pi-enrolled/status") {
			if strings.Contains(string(msg.Payload), `"online"`) {
				return true
			}
		}
		return false
	})
	d.kill()

	// A spent token is refused; a new one rotates the password.
	if out, code := runCLI(t, "enroll", "--config", cfg, "--hub", hubURL, "--token", t1); code != 1 || !strings.Contains(out, "bad_token") {
		t.Fatalf("spent token: %d %s", code, out)
	}
	if out, code := runCLI(t, "enroll", "--config", cfg, "--hub", hubURL, "--token", token()); code != 0 || !strings.Contains(out, "pi-enrolled") {
		t.Fatalf("re-enrol: %d %s", code, out)
	}
	c2, _ := enroll.ReadCredentials(edir)
	if c2.Password == c1.Password || c2.Device != c1.Device {
		t.Fatalf("re-enrolment did not rotate: %+v", c2)
	}
	dial := func(c *enroll.Credentials) error {
		pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: m.URL(), Username: c.Username, Password: c.Password, Timeout: 5 * time.Second})
		if err == nil {
			pc.Disconnect(10)
		}
		return err
	}
	if err := dial(c1); err == nil {
		t.Fatal("the broker accepts the password from before the rotation")
	}
	if err := dial(c2); err != nil {
		t.Fatalf("the rotated credentials: %v", err)
	}
}
