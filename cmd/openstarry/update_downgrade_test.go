//go:build unix

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/release"
	"github.com/openstarry/openstarry-edge/core/update"
	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

const v1 = "v1.0.0-test"

var (
	relV1Once sync.Once
	relV1     string // the v1 binary, in a directory signed by the v2 release's key
	relV1Err  error
)

// buildReleaseV1 is an older signed release: version v1, signed by the
// same fleet key as buildRelease's v2.
func buildReleaseV1(t *testing.T, r testRelease) string {
	t.Helper()
	relV1Once.Do(func() {
		dir := filepath.Join(filepath.Dir(binPath), "release-v1", "dist")
		if relV1Err = os.MkdirAll(dir, 0o700); relV1Err != nil {
			return
		}
		relV1 = filepath.Join(dir, fmt.Sprintf("openstarry-%s-%s", runtime.GOOS, runtime.GOARCH))
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+v1, "-o", relV1, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			relV1Err = fmt.Errorf("build v1: %v\n%s", err, out)
			return
		}
		priv, err := design.ReadPrivateKeyFile(r.key)
		if err != nil {
			relV1Err = err
			return
		}
		_, relV1Err = release.Sign(dir, priv)
	})
	if relV1Err != nil {
		t.Fatal(relV1Err)
	}
	return relV1
}

// TestUpdateDowngradeRefused: with v2 running, an older signed release
// (v1) is refused by `openstarry update` (run by another binary, "dev")
// and by the hub's signed update command, and nothing changes; --rollback
// and the signed command with "rollback": true install it, and the
// journal's from_version is the version the daemon ran (v2), not the
// CLI's.
func TestUpdateDowngradeRefused(t *testing.T) {
	r := buildRelease(t)
	old := buildReleaseV1(t, r)
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(old))))
	defer srv.Close()
	oldURL := srv.URL + "/" + filepath.Base(old)
	srv2 := httptest.NewServer(http.FileServer(http.Dir(r.dir)))
	defer srv2.Close()
	newURL := srv2.URL + "/" + filepath.Base(r.bin)
	data := dataDir(t)
	cfg := updateConfig(t, data, r, "mqtt:\n  broker: "+m.URL()+"\n  device: dev-d\n")
	d := startDaemon(t, cfg)

	out, code := runCLI(t, "update", "--config", cfg, "--from", r.bin)
	if code != 0 || !strings.Contains(out, "dev → "+v2+": committed") {
		t.Fatalf("update to v2: %d\n%s\n%s", code, out, d.logs())
	}
	p := update.PathsFor(data)
	slotSHA := func() string { s, _ := release.FileSHA256(p.Slot); return s }
	before := readJournal(t, data)

	out, code = runCLI(t, "update", "--config", cfg, "--from", old)
	if code != 1 || !strings.Contains(out, "older than the running "+v2) {
		t.Fatalf("CLI downgrade to v1: %d\n%s", code, out)
	}
	if v := daemonStatus(t, data).Version; v != v2 || slotSHA() != r.candidateSH {
		t.Fatalf("after the refused CLI downgrade: version %s, slot %s", v, slotSHA())
	}
	if j := readJournal(t, data); j.Phase != update.PhaseCommitted || !j.Started.Equal(before.Started) {
		t.Fatalf("the refused CLI downgrade changed the journal: %+v", j)
	}

	// The CLI's rollback: from_version is the daemon's version, not the
	// CLI's own ("dev").
	out, code = runCLI(t, "update", "--config", cfg, "--from", old, "--rollback")
	if code != 0 || !strings.Contains(out, v2+" → "+v1+": committed") {
		t.Fatalf("CLI rollback to v1: %d\n%s\n%s", code, out, d.logs())
	}
	if j := readJournal(t, data); j.From != v2 || j.To != v1 || !j.Rollback {
		t.Fatalf("journal after the CLI rollback %+v", j)
	}

	// The same through the hub's signed command: up to v2, then v1 is
	// refused unless the command says rollback.
	d.waitLog("mqtt: connected to "+m.URL(), 30*time.Second)
	send := func(url string, extra ...string) (string, int) {
		args := append([]string{"fleet", "command", "--broker", m.URL(), "--device", "dev-d", "--key", r.key,
			"--url", url, "--timeout", "3m"}, extra...)
		return runCLI(t, append(args, "update")...)
	}
	out, code = send(newURL)
	if code != 0 || !strings.Contains(out, `"state":"committed"`) {
		t.Fatalf("fleet update to v2: %d\n%s\n%s", code, out, d.logs())
	}
	out, code = send(oldURL)
	if code != 1 || !strings.Contains(out, "older than the running "+v2) {
		t.Fatalf("fleet downgrade to v1: %d\n%s", code, out)
	}
	if v := daemonStatus(t, data).Version; v != v2 || slotSHA() != r.candidateSH {
		t.Fatalf("after the refused fleet downgrade: version %s", v)
	}
	out, code = send(oldURL, "--rollback")
	if code != 0 || !strings.Contains(out, `"state":"committed"`) {
		t.Fatalf("fleet rollback to v1: %d\n%s\n%s", code, out, d.logs())
	}
	if v := daemonStatus(t, data).Version; v != v1 {
		t.Fatalf("after the rollback: version %s", v)
	}
	if j := readJournal(t, data); j.From != v2 || j.To != v1 || !j.Rollback || j.Phase != update.PhaseCommitted {
		t.Fatalf("journal after the rollback %+v", j)
	}
}

// TestFleetUpdateEmbeddedBroker: the hub's update command through the
// daemon's own embedded broker, which restarts with the daemon: the
// command's sender connects again and reads the outcome, and exits 0 when
// the update committed.
func TestFleetUpdateEmbeddedBroker(t *testing.T) {
	r := buildRelease(t)
	srv := httptest.NewServer(http.FileServer(http.Dir(r.dir)))
	defer srv.Close()
	port := loopback.FreePort(t)
	data := dataDir(t)
	cfg := updateConfig(t, data, r, fmt.Sprintf("mqtt:\n  broker_listen: 127.0.0.1:%d\n  device: dev-e\n", port))
	d := startDaemon(t, cfg)
	broker := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	d.waitLog("mqtt: connected to "+broker, 30*time.Second)
	out, code := runCLI(t, "fleet", "command", "--broker", broker, "--device", "dev-e", "--key", r.key,
		"--url", srv.URL+"/"+filepath.Base(r.bin), "--timeout", "3m", "update")
	if code != 0 || !strings.Contains(out, `"state":"committed"`) {
		t.Fatalf("update through the embedded broker: %d\n%s\n%s", code, out, d.logs())
	}
	if v := daemonStatus(t, data).Version; v != v2 {
		t.Fatalf("version %s after the update", v)
	}
}
