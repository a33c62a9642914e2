//go:build unix

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/release"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestFleetStagedUpdate: three devices on one Mosquitto; on dev-b the new
// version crash-loops at boot. `fleet update --stages 1,100%` updates the
// canary dev-a, then dev-b and dev-c at once: dev-b puts the previous
// version back after its health check fails, so the rollout halts and
// dev-c, which committed, is updated back to the previous release
// (--rollback-url). dev-a, of the wave that passed, keeps the new version.
func TestFleetStagedUpdate(t *testing.T) {
	r := buildRelease(t)
	// The previous release: this test's binary, signed by the same key.
	prev := filepath.Join(t.TempDir(), "prev")
	if err := os.MkdirAll(prev, 0o700); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("openstarry-%s-%s", runtime.GOOS, runtime.GOARCH)
	data, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prev, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	priv, err := design.ReadPrivateKeyFile(r.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Sign(prev, priv); err != nil {
		t.Fatal(err)
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	mux := http.NewServeMux()
	mux.Handle("/new/", http.StripPrefix("/new/", http.FileServer(http.Dir(r.dir))))
	mux.Handle("/prev/", http.StripPrefix("/prev/", http.FileServer(http.Dir(prev))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	datas := startUpdateDevices(t, r, m.URL(), "dev-a", "dev-b", "dev-c")
	out, code := runCLI(t, "fleet", "update", "--broker", m.URL(), "--key", r.key, "--stages", "1,100%",
		"--url", srv.URL+"/new/"+name, "--rollback-url", srv.URL+"/prev/"+name, "--timeout", "5m")
	t.Logf("fleet update:\n%s", out)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, line := range []string{
		"fleet update: 3 devices in 2 waves (1, 100%) from " + srv.URL + "/new/" + name,
		"wave 1/2: dev-a",
		"  dev-a: committed (dev → " + v2 + ", running " + v2 + ")",
		"wave 2/2: dev-b dev-c",
		"  dev-b: rolled_back (dev → " + v2 + ", running dev): ",
		"  dev-c: committed (dev → " + v2 + ", running " + v2 + ")",
		"wave 2/2 failed on dev-b: halted; 0 devices of later waves not updated",
		"rolling back wave 2/2 from " + srv.URL + "/prev/" + name + ": dev-c",
		"  dev-c: committed (" + v2 + " → dev, running dev)",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("no %q", line)
		}
	}
	for dev, want := range map[string]string{"dev-a": v2, "dev-b": "dev", "dev-c": "dev"} {
		if v := daemonStatus(t, datas[dev]).Version; v != want {
			t.Errorf("%s runs %s, want %s", dev, v, want)
		}
	}
}
