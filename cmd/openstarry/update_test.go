//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/release"
	"github.com/openstarry/openstarry-edge/core/update"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

const v2 = "v2.0.0-test"

// testRelease is a signed release of a second build: version v2, with the
// openstarry_faults tag (OPENSTARRY_FAULT=crash_boot makes it crash at
// boot, schema_next makes it declare the next snapshot schema).
type testRelease struct {
	dir, bin    string // the release directory and the binary in it
	pub, key    string // the fleet key pair that signed it
	foreign     string // the same binary signed by another key
	err         error
	factorySHA  string
	candidateSH string
}

var (
	relOnce sync.Once
	rel     testRelease
)

func buildRelease(t *testing.T) testRelease {
	t.Helper()
	relOnce.Do(func() {
		base := filepath.Join(filepath.Dir(binPath), "release-v2")
		rel.dir = filepath.Join(base, "dist")
		rel.foreign = filepath.Join(base, "foreign")
		name := fmt.Sprintf("openstarry-%s-%s", runtime.GOOS, runtime.GOARCH)
		rel.bin = filepath.Join(rel.dir, name)
		for _, d := range []string{rel.dir, rel.foreign} {
			if rel.err = os.MkdirAll(d, 0o700); rel.err != nil {
				return
			}
		}
		build := exec.Command("go", "build", "-trimpath", "-tags", "openstarry_faults",
			"-ldflags", "-s -w -X main.version="+v2, "-o", rel.bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			rel.err = fmt.Errorf("build v2: %v\n%s", err, out)
			return
		}
		keys := filepath.Join(base, "fleet")
		if _, rel.err = design.GenerateKeyFiles(keys, true, nil); rel.err != nil {
			return
		}
		rel.pub, rel.key = keys+".pub", keys+".key"
		priv, err := design.ReadPrivateKeyFile(rel.key)
		if err != nil {
			rel.err = err
			return
		}
		if _, rel.err = release.Sign(rel.dir, priv); rel.err != nil {
			return
		}
		data, _ := os.ReadFile(rel.bin)
		if rel.err = os.WriteFile(filepath.Join(rel.foreign, name), data, 0o755); rel.err != nil {
			return
		}
		if _, err := design.GenerateKeyFiles(filepath.Join(base, "other"), true, nil); err != nil {
			rel.err = err
			return
		}
		other, _ := design.ReadPrivateKeyFile(filepath.Join(base, "other.key"))
		_, rel.err = release.Sign(rel.foreign, other)
		rel.factorySHA, _ = release.FileSHA256(binPath)
		rel.candidateSH, _ = release.FileSHA256(rel.bin)
	})
	if rel.err != nil {
		t.Fatal(rel.err)
	}
	return rel
}

func updateConfig(t *testing.T, data string, r testRelease, extra string) string {
	return daemonConfig(t, data, "design:\n  trusted_keys: ["+r.pub+"]\nupdate:\n  trial_timeout: 60s\n  max_boots: 3\n"+extra)
}

func readJournal(t *testing.T, data string) *update.Journal {
	t.Helper()
	j, err := update.ReadJournal(update.PathsFor(data).Journal)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestUpdateCLI: `openstarry update --from FILE` refuses a binary signed by
// another key and one that declares a snapshot schema this version cannot
// load; it installs a good one into the running daemon, which restarts on
// trial, commits, and runs the new version; the next start of the
// installed binary runs the kept one.
func TestUpdateCLI(t *testing.T) {
	r := buildRelease(t)
	data := dataDir(t)
	cfg := updateConfig(t, data, r, "")
	d := startDaemon(t, cfg)

	out, code := runCLI(t, "update", "--config", cfg, "--from", filepath.Join(r.foreign, filepath.Base(r.bin)))
	if code != 1 || !strings.Contains(out, "not signed by a trusted fleet key") {
		t.Fatalf("foreign key: %d\n%s", code, out)
	}
	out, code = runCLIEnv(t, []string{"OPENSTARRY_FAULT=schema_next"}, "update", "--config", cfg, "--from", r.bin)
	if code != 1 || !strings.Contains(out, "writes snapshot schema 2") {
		t.Fatalf("newer snapshot schema: %d\n%s", code, out)
	}
	if j := readJournal(t, data); j != nil {
		t.Fatalf("a refused update left a journal: %+v", j)
	}
	if _, err := os.Stat(update.PathsFor(data).Slot); !os.IsNotExist(err) {
		t.Fatal("a refused update installed a binary")
	}
	if v := daemonStatus(t, data).Version; v != "dev" {
		t.Fatalf("version %s after refusals", v)
	}

	out, code = runCLI(t, "update", "--config", cfg, "--from", r.bin)
	if code != 0 || !strings.Contains(out, "dev → "+v2+": committed") {
		t.Fatalf("update: %d\n%s\n%s", code, out, d.logs())
	}
	if st := daemonStatus(t, data); st.Version != v2 {
		t.Fatalf("version %s after the update", st.Version)
	}
	j := readJournal(t, data)
	if j.Phase != update.PhaseCommitted || j.Boots != 1 || j.ToSHA != r.candidateSH {
		t.Fatalf("journal %+v", j)
	}
	p := update.PathsFor(data)
	for path, want := range map[string]string{p.Slot: r.candidateSH, p.Prev: r.factorySHA} {
		if got, _ := release.FileSHA256(path); got != want {
			t.Fatalf("%s: sha256 %s, want %s", path, got, want)
		}
	}
	// The guard forwards SIGTERM and ends with the daemon.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := d.wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("stop: %d %v\n%s", code, err, d.logs())
	}
	// The installed binary runs the kept version.
	d = startDaemon(t, cfg)
	d.waitLog("update: running the version the last update kept", 5*time.Second)
	if v := daemonStatus(t, data).Version; v != v2 {
		t.Fatalf("after a restart: version %s", v)
	}
}

// startUpdateDevices starts a daemon per device on the hub at broker, each
// set up to update from r; on dev-b the new version crash-loops at boot
// (OPENSTARRY_FAULT=crash_boot). It returns each device's data directory.
func startUpdateDevices(t *testing.T, r testRelease, broker string, devs ...string) map[string]string {
	t.Helper()
	datas := map[string]string{}
	for _, dev := range devs {
		data := dataDir(t)
		datas[dev] = data
		cfg := updateConfig(t, data, r, "mqtt:\n  broker: "+broker+"\n  device: "+dev+"\n")
		cmd := exec.Command(binPath, "start", "--config", cfg)
		if dev == "dev-b" {
			cmd = exec.Command("env", "OPENSTARRY_FAULT=crash_boot", binPath, "start", "--config", cfg)
		}
		c := startChildCmd(t, cmd)
		c.waitLog("boot complete", 30*time.Second)
		c.waitLog("mqtt: connected to "+broker, 10*time.Second)
	}
	return datas
}

// TestFleetUpdate: the hub's signed update command switches dev-a to the
// new version; dev-b, on which the new version crash-loops at boot, rolls
// back by itself; both outcomes reach the hub as the command's second reply
// and retained on openstarry/{device}/update.
func TestFleetUpdate(t *testing.T) {
	r := buildRelease(t)
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	srv := httptest.NewServer(http.FileServer(http.Dir(r.dir)))
	defer srv.Close()
	url := srv.URL + "/" + filepath.Base(r.bin)
	updates := mqtttest.Collect(t, m.URL(), "update-watch", true, "openstarry/+/update")

	datas := startUpdateDevices(t, r, m.URL(), "dev-a", "dev-b")
	send := func(dev string) (string, int) {
		return runCLI(t, "fleet", "command", "--broker", m.URL(), "--device", dev, "--key", r.key,
			"--url", url, "--timeout", "3m", "update")
	}
	out, code := send("dev-a")
	if code != 0 || !strings.Contains(out, `"state":"installed"`) || !strings.Contains(out, `"state":"committed"`) {
		t.Fatalf("update dev-a: %d\n%s", code, out)
	}
	if v := daemonStatus(t, datas["dev-a"]).Version; v != v2 {
		t.Fatalf("dev-a runs %s", v)
	}
	out, code = send("dev-b")
	if code != 1 || !strings.Contains(out, `"state":"rolled_back"`) || !strings.Contains(out, "crash loop") {
		t.Fatalf("update dev-b: %d\n%s", code, out)
	}
	if v := daemonStatus(t, datas["dev-b"]).Version; v != "dev" {
		t.Fatalf("dev-b runs %s after the rollback", v)
	}
	if j := readJournal(t, datas["dev-b"]); j.Phase != update.PhaseRolledBack || j.Boots != 4 {
		t.Fatalf("dev-b journal %+v", j)
	}
	outcome := func(dev string) fleet.Outcome {
		var o fleet.Outcome
		for _, msg := range updates.Messages("openstarry/" + dev + "/update") {
			_ = json.Unmarshal(msg.Payload, &o)
		}
		return o
	}
	wait.For(t, 10*time.Second, "both outcomes on openstarry/+/update", func() bool {
		return outcome("dev-a").State == fleet.UpdateCommitted && outcome("dev-b").State == fleet.UpdateRolledBack
	})
	if o := outcome("dev-b"); o.Running != "dev" || o.To != v2 || !strings.Contains(o.Reason, "crash loop") {
		t.Fatalf("dev-b outcome %+v", o)
	}
	// Retained: a fleet tool that connects later reads them.
	late := mqtttest.Collect(t, m.URL(), "update-late", true, "openstarry/+/update")
	wait.For(t, 10*time.Second, "retained outcomes", func() bool {
		return len(late.Messages("openstarry/dev-a/update")) == 1 && len(late.Messages("openstarry/dev-b/update")) == 1
	})
}

// TestUpdateKilled: SIGKILL at a random instant of an update (the CLI
// staging, the daemon installing, stopping, the guard, the new version's
// boot, its commit or its rollback) leaves a device whose next start boots,
// settles the update (committed with the new version, or not applied or
// rolled back with the old one) and runs the binary the journal names.
// Every other run installs a version that crash-loops at boot. The first
// run of each kind is not killed and measures how long an update takes;
// the others are killed at a random instant within that time.
// OPENSTARRY_TORTURE=1 runs 24 kills, make test 4.
func TestUpdateKilled(t *testing.T) {
	r := buildRelease(t)
	kills := 4
	if os.Getenv("OPENSTARRY_TORTURE") == "1" {
		kills = 24
	}
	span := map[bool]time.Duration{}
	outcomes := map[string]int{}
	for i := 0; i < kills+2; i++ {
		crash := i%2 == 1
		data := dataDir(t)
		cfg := updateConfig(t, data, r, "")
		cmd := exec.Command(binPath, "start", "--config", cfg)
		if crash {
			cmd = exec.Command("env", "OPENSTARRY_FAULT=crash_boot", binPath, "start", "--config", cfg)
		}
		d := startChildCmd(t, cmd)
		d.waitLog("boot complete", 30*time.Second)
		cli := exec.Command(binPath, "update", "--config", cfg, "--from", r.bin)
		start := time.Now()
		if err := cli.Start(); err != nil {
			t.Fatal(err)
		}
		cliDone := make(chan error, 1)
		go func() { cliDone <- cli.Wait() }()
		if i < 2 {
			if err := <-cliDone; (err != nil) != crash {
				t.Fatalf("update (crash-looping: %v): %v\n%s", crash, err, d.logs())
			}
			span[crash] = time.Since(start)
			t.Logf("an update (crash-looping: %v) takes %s", crash, span[crash].Round(time.Millisecond))
		} else {
			at := time.Duration(rand.Int64N(int64(span[crash])))
			time.Sleep(at)
			_ = cli.Process.Kill()
			d.kill()
			<-cliDone
			t.Logf("kill %d (crash-looping: %v) at %s", i-1, crash, at.Round(time.Millisecond))
		}
		d.kill()
		waitAgentsGone(t, data)
		// What systemd does: start the installed binary again.
		cmd = exec.Command(binPath, "start", "--config", cfg)
		if crash {
			cmd = exec.Command("env", "OPENSTARRY_FAULT=crash_boot", binPath, "start", "--config", cfg)
		}
		d = startChildCmd(t, cmd)
		var j *update.Journal
		wait.For(t, 90*time.Second, "the update to settle", func() bool {
			j = readJournal(t, data)
			return j == nil || j.Phase.Final()
		})
		// A rollback execs the old version: wait for the one the journal
		// names, with its master running. After a crash loop that is a
		// fourth boot, and its master's, which a loaded machine takes
		// longer than 30 s over; the wait ends as soon as they run.
		committed := j != nil && j.Phase == update.PhaseCommitted
		var st *control.Status
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if st = statusOf(data); st != nil {
				if a, _ := agentInfo(st, "master"); committed == (st.Version == v2) && a.State == "running" {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if st == nil {
			t.Fatalf("run %d: no daemon answers\n%s", i, d.logs())
		}
		phase := "none"
		if j != nil {
			phase = string(j.Phase)
		}
		outcomes[phase]++
		if committed != (st.Version == v2) || (crash && committed) {
			t.Fatalf("run %d: journal %s but version %s running\n%s", i, phase, st.Version, d.logs())
		}
		slot, _ := release.FileSHA256(update.PathsFor(data).Slot)
		if want := map[bool]string{true: r.candidateSH, false: r.factorySHA}[st.Version == v2]; slot != "" && slot != want {
			t.Fatalf("run %d: the slot holds %s, the running version is %s", i, slot, st.Version)
		}
		if a, _ := agentInfo(st, "master"); a.State != "running" {
			t.Fatalf("run %d: master %s\n%s", i, a.State, d.logs())
		}
		d.kill()
		waitAgentsGone(t, data)
	}
	t.Logf("outcomes of %d updates, %d of them killed: %v", kills+2, kills, outcomes)
}

// waitAgentsGone waits until no process names the data directory on its
// command line: a killed daemon's agents exit when they notice.
func waitAgentsGone(t *testing.T, data string) {
	t.Helper()
	wait.For(t, 20*time.Second, "the killed daemon's processes to exit", func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), data+"\x00") || strings.Contains(string(b), data+"/") {
				st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
				if !strings.Contains(string(st), ") Z ") { // a zombie holds nothing
					return false
				}
			}
		}
		return true
	})
}

// statusOf is the daemon's status, nil while none answers.
func statusOf(data string) *control.Status {
	c, err := control.Discover(data)
	if err != nil {
		return nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return nil
	}
	return st
}
