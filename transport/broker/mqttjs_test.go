package broker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// mqttJSDir returns the directory whose node_modules holds mqtt.js (npm
// install --prefix DIR mqtt@5, as .ci/run does): $OPENSTARRY_MQTTJS, else
// the user's cache directory's openstarry/mqttjs. Without node or mqtt.js
// the test is skipped, except in CI (CI=true), where it fails.
func mqttJSDir(t *testing.T) (node, dir string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; .ci/run installs it (CI=true: not skipped)", what)
		}
		t.Skipf("%s: skipped (.ci/run installs it: npm install --prefix %s mqtt@5; or set OPENSTARRY_MQTTJS to such a directory)", what, dir)
	}
	dir = os.Getenv("OPENSTARRY_MQTTJS")
	if dir == "" {
		if cache, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(cache, "openstarry", "mqttjs")
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mqtt", "package.json")); err != nil {
		missing("mqtt.js is not installed in " + dir)
	}
	return node, dir
}

// runMQTTJS runs testdata/mqttjs/check.js against url and fails the test
// with its output when a check fails.
func runMQTTJS(t *testing.T, node, dir, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.js", url)
	cmd.Dir = filepath.Join("testdata", "mqttjs")
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		var fails []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "FAIL ") {
				fails = append(fails, l)
			}
		}
		t.Fatalf("mqtt.js against %s: %v\n%s\n\nwhole output:\n%s", url, err, strings.Join(fails, "\n"), out)
	}
	t.Logf("mqtt.js against %s:\n%s", url, out)
}

// TestMQTTJS checks every MQTT 5 packet the broker sends for the features
// OpenStarry uses (CONNECT with session expiry, QoS 1 PUBLISH with
// properties and its PUBACK, SUBSCRIBE plain and $share, UNSUBSCRIBE,
// retained messages, wills, a session taken over by a second connection,
// a persistent session's queued message) with mqtt.js, a
// client of another implementation, which refuses a malformed packet or a
// reason code its packet may not carry. The same checks run against
// Mosquitto, the reference: a check that Mosquitto fails is a wrong check.
// mochi v2.7.9 answered a QoS 1 PUBLISH with PUBACK reason code 0x01 (a
// SUBACK code) and the publish's properties echoed; mqtt.js dropped the
// connection ("Invalid puback reason code").
func TestMQTTJS(t *testing.T) {
	node, dir := mqttJSDir(t)
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.StartMosquitto(t, mqtttest.Options{NoPersistence: true})
		runMQTTJS(t, node, dir, fmt.Sprintf("mqtt://127.0.0.1:%d", m.Port))
	})
	t.Run("embedded", func(t *testing.T) {
		b := startBroker(t, Config{DataDir: t.TempDir()})
		runMQTTJS(t, node, dir, "mqtt://"+b.Addr().String())
	})
}
