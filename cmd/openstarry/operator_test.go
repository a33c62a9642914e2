//go:build unix

package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/transport/enroll"
)

// TestHubOperator: on a Mosquitto with the dynamic security plugin, a
// device enrolled through the hub. Its admin, which may read but not
// publish the fleet's topics, sends a signed command: the hub acknowledges
// the publication and drops it, and fleet command says so at once (it said,
// after 30 s, "is it online, and does it trust this key?"), with the
// reason code of Mosquitto's MQTT 5 PUBACK, 0x87; so do a task sent as the
// admin and a command sent with a device's user to another device, which
// may not even subscribe to check (that one waited out its timeout, with
// "the hub may have refused" for all explanation). `hub operator
// add ops` creates an operator whose commands, tasks and fleet status work;
// adding it again sets the password given.
func TestHubOperator(t *testing.T) {
	dir := t.TempDir()
	m, state, hubURL, _ := startHub(t, dir)
	tok, code := runCLI(t, "hub", "token", "--state", state, "--device", "pi-op")
	if code != 0 {
		t.Fatal(tok)
	}
	if out, code := runCLI(t, "templates", "keygen", "--out", filepath.Join(dir, "fleet")); code != 0 {
		t.Fatal(out)
	}
	key := filepath.Join(dir, "fleet.key")
	data := dataDir(t)
	cfg := daemonConfig(t, data, "design:\n  trusted_keys: ["+filepath.Join(dir, "fleet.pub")+"]\nmqtt:\n  telemetry_interval: 1s\n")
	if out, code := runCLI(t, "enroll", "--config", cfg, "--hub", hubURL, "--token", strings.TrimSpace(tok)); code != 0 {
		t.Fatalf("enroll: %s", out)
	}
	d := startDaemon(t, cfg)
	d.waitLog("fleet: connected for the claims", 30*time.Second)

	as := func(user, password string, args ...string) (string, int) {
		return runCLIEnv(t, []string{"OPENSTARRY_MQTT_USERNAME=" + user, "OPENSTARRY_MQTT_PASSWORD=" + password}, args...)
	}
	// Mosquitto speaks MQTT 5: the refusal is the PUBACK's reason code.
	const notAuthorized = "MQTT 5 reason code 0x87 (not authorized)"
	out, code := as("hub-admin", "admin-secret", "fleet", "command", "--broker", m.URL(), "--device", "pi-op", "--key", key, "--timeout", "20s", "status")
	if code != 1 || !strings.Contains(out, "the hub refused the publication to openstarry/pi-op/commands/status: "+notAuthorized) ||
		!strings.Contains(out, `give user "hub-admin" write access to it`) || !strings.Contains(out, "openstarry hub operator add") {
		t.Fatalf("a command the hub dropped: exit %d\n%s", code, out)
	}
	out, code = as("hub-admin", "admin-secret", "task", "send", "--broker", m.URL(), "--device", "pi-op", "--agent", "master", "--input", "hi", "--wait", "--timeout", "20s")
	if code != 1 || !strings.Contains(out, "the hub refused the publication to openstarry/pi-op/agents/master/tasks: "+notAuthorized) {
		t.Fatalf("a task the hub dropped: exit %d\n%s", code, out)
	}
	// The device's own user may neither publish nor subscribe to another
	// device's commands: over MQTT 3.1.1 nothing could be checked, and the
	// command waited for its --timeout ("the hub may have refused").
	creds, err := enroll.ReadCredentials(enroll.Dir(data))
	if err != nil || creds == nil {
		t.Fatalf("the device's credentials: %v", err)
	}
	out, code = as(creds.Username, creds.Password, "fleet", "command", "--broker", m.URL(), "--device", "pi-other", "--key", key, "--timeout", "20s", "status")
	if code != 1 || !strings.Contains(out, "the hub refused the publication to openstarry/pi-other/commands/status: "+notAuthorized) ||
		!strings.Contains(out, `give user "pi-op" write access to it`) {
		t.Fatalf("a command to another device with a device's user: exit %d\n%s", code, out)
	}

	out, code = runCLIEnv(t, []string{"OPENSTARRY_HUB_ADMIN_PASSWORD=admin-secret"},
		"hub", "operator", "add", "ops", "--broker", m.URL(), "--admin-user", "hub-admin")
	pw := regexp.MustCompile(`(?m)^password: (\S+)$`).FindStringSubmatch(out)
	if code != 0 || !strings.Contains(out, "operator ops created on "+m.URL()+" with role openstarry-operator") || pw == nil {
		t.Fatalf("hub operator add: exit %d\n%s", code, out)
	}
	out, code = as("ops", pw[1], "fleet", "command", "--broker", m.URL(), "--device", "pi-op", "--key", key, "status")
	if code != 0 || !strings.Contains(out, `"ok":true`) {
		t.Fatalf("status as the operator: exit %d\n%s", code, out)
	}
	out, code = as("ops", pw[1], "task", "send", "--broker", m.URL(), "--device", "pi-op", "--agent", "master", "--input", "hi", "--wait")
	if code != 0 || !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("task as the operator: exit %d\n%s", code, out)
	}
	out, code = as("ops", pw[1], "fleet", "status", "--broker", m.URL(), "--wait", "2s")
	if code != 0 || !regexp.MustCompile(`(?m)^pi-op +online `).MatchString(out) {
		t.Fatalf("fleet status as the operator: exit %d\n%s", code, out)
	}
	// Again, with a password of the operator's choosing.
	out, code = runCLIEnv(t, []string{"OPENSTARRY_HUB_ADMIN_PASSWORD=admin-secret", "OPENSTARRY_HUB_OPERATOR_PASSWORD=chosen-pw"},
		"hub", "operator", "add", "ops", "--broker", m.URL(), "--admin-user", "hub-admin")
	if code != 0 || !strings.Contains(out, "operator ops updated") || strings.Contains(out, "password:") {
		t.Fatalf("hub operator add again: exit %d\n%s", code, out)
	}
	if out, code = as("ops", "chosen-pw", "fleet", "command", "--broker", m.URL(), "--device", "pi-op", "--key", key, "config.get"); code != 0 {
		t.Fatalf("config.get with the new password: exit %d\n%s", code, out)
	}
	if _, code = as("ops", pw[1], "fleet", "status", "--broker", m.URL(), "--wait", "1s"); code == 0 {
		t.Fatal("the operator's old password still works")
	}
}
