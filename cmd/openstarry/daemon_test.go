//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/redis/redistest"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// daemonConfig writes a configuration for a test daemon: HTTP on a free
// loopback port, no MQTT unless extra says otherwise, quick supervision.
func daemonConfig(t testing.TB, data, extra string) string {
	t.Helper()
	base := fmt.Sprintf("data: %s\nhttp:\n  listen: 127.0.0.1:0\n", data)
	if !strings.Contains(extra, "mqtt:") {
		base += "mqtt:\n  disabled: true\n"
	}
	if !strings.Contains(extra, "supervise:") {
		base += "supervise:\n  backoff_initial: 50ms\n  stop_timeout: 5s\n  ready_timeout: 20s\n"
	}
	path := filepath.Join(t.TempDir(), "openstarry.yaml")
	if err := os.WriteFile(path, []byte(base+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dataDir is a short data directory (the control socket path must stay
// under about 100 bytes).
func dataDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "osd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startDaemon runs `openstarry start --config FILE` and waits for the boot
// to complete.
func startDaemon(t testing.TB, cfgPath string) *child {
	t.Helper()
	c := startChild(t, false, "start", "--config", cfgPath)
	c.waitLog("boot complete", 30*time.Second)
	return c
}

func daemonStatus(t *testing.T, data string) *control.Status {
	t.Helper()
	st, err := tryStatus(data)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tryStatus asks the daemon on data for its status.
func tryStatus(data string) (*control.Status, error) {
	c, err := control.Discover(data)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(context.Background())
}

func agentInfo(st *control.Status, id string) (control.AgentInfo, bool) {
	for _, a := range st.Agents {
		if a.ID == id {
			return a, true
		}
	}
	return control.AgentInfo{}, false
}

// waitAgent polls the status until cond holds for agent id (a daemon that
// does not answer yet is asked again).
func waitAgent(t *testing.T, data, id string, timeout time.Duration, cond func(control.AgentInfo) bool) control.AgentInfo {
	t.Helper()
	var last control.AgentInfo
	err := wait.Poll(timeout, func() error {
		st, err := tryStatus(data)
		if err != nil {
			return err
		}
		a, ok := agentInfo(st, id)
		if !ok {
			return errors.New("not in the status")
		}
		last = a
		if !cond(a) {
			return errors.New("condition not met")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("agent %s: condition not met within %s (%v); last %+v", id, timeout, err, last)
	}
	return last
}

// pidGone reports whether the process no longer exists (a zombie counts as
// gone: it runs nothing and holds no lock).
func pidGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	return regexp.MustCompile(`(?m)^State:\s+Z`).Match(data)
}

var phaseRe = regexp.MustCompile(`"phase":(\d),"duration_ms":([0-9.]+)[^\n]*"message":"phase (\d)/4 ([^"]+)"`)

// TestDaemonColdBoot: the four phases are logged with their durations, the
// master comes online, status shows it, SIGTERM stops it cleanly.
func TestDaemonColdBoot(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	logs := c.logs()
	ms := phaseRe.FindAllStringSubmatch(logs, -1)
	if len(ms) != 4 {
		t.Fatalf("%d phase lines:\n%s", len(ms), logs)
	}
	for i, m := range ms {
		if m[1] != strconv.Itoa(i+1) || m[3] != m[1] {
			t.Errorf("phase line %d: %v", i, m)
		}
	}
	for _, want := range []string{"phase 1/4 infrastructure ready", "phase 2/4 design layer ready", "phase 3/4 master online", "phase 4/4 workers on demand ready"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %q", want)
		}
	}
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !regexp.MustCompile(`(?m)^master\s+master\s+master@1\.0\.0\s+\d+\s+running\s+0\s+0\s+0\s+\S+\s+embedded\s+-$`).MatchString(out) ||
		!strings.Contains(out, "\nstate store: bbolt:// (durable)\n") {
		t.Fatalf("status (%d):\n%s", code, out)
	}
	t.Logf("openstarry status:\n%s", out)
	// MQTT is off in this configuration: /healthz and /metrics say so,
	// neither up nor down.
	code, body := api(t, "GET", base+"/healthz", nil)
	if code != 200 || !strings.Contains(string(body), `"mqtt": "off"`) {
		t.Fatalf("healthz %d %s", code, body)
	}
	code, body = api(t, "GET", base+"/metrics", nil)
	if code != 200 || !strings.Contains(string(body), "\nopenstarry_infra_enabled{infra=\"mqtt\"} 0\n") ||
		strings.Contains(string(body), "openstarry_infra_up{") {
		t.Fatalf("metrics with mqtt off: %d\n%s", code, body)
	}
	pid := daemonStatus(t, data).Agents[0].PID
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := c.wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("stop: %d %v\n%s", code, err, c.logs())
	}
	if !pidGone(pid) || !strings.Contains(c.logs(), "stopped cleanly") {
		t.Fatalf("master not stopped cleanly:\n%s", c.logs())
	}
	for _, f := range []string{"control.sock", "control.token"} {
		if _, err := os.Stat(filepath.Join(data, "run", f)); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
	if _, code := runCLI(t, "status", "--data", data); code != 1 {
		t.Errorf("status without a daemon exits %d", code)
	}
}

// TestDaemonMasterKilled: tasks sent to the master through the daemon, the master
// SIGKILLed mid-way, restarted by the daemon and hydrated; every task ends,
// none runs twice, none is lost.
func TestDaemonMasterKilled(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	m, _ := agentInfo(daemonStatus(t, data), "master")
	const n = 40
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("k%02d", i)
		body := appendTask(ids[i], "out.txt")
		if i%2 == 1 { // slow ones, so that the kill lands mid-queue
			body = []byte(fmt.Sprintf(`{"task_id":%q,"input":{"call":[{"tool":"sleep_ms","args":{"ms":15}},{"tool":"file_append","args":{"file":"out.txt","line":"line %s"}}]}}`, ids[i], ids[i]))
		}
		if code, resp, err := postTask(t.Context(), base, "master", body); err != nil || code != 202 {
			t.Fatalf("task %s: %d %s %v", ids[i], code, resp, err)
		}
	}
	before, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m2 := waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool {
		return a.State == control.StateRunning && a.PID != m.PID
	})
	if m2.Restarts != 1 || !strings.Contains(m2.LastError, "killed") {
		t.Fatalf("after the kill: %+v", m2)
	}
	c.waitLog("previous run was interrupted", 5*time.Second)
	hyd := regexp.MustCompile(`hydrated at tick (\d+) with (\d+) queued events`).FindStringSubmatch(c.logs())
	if hyd == nil || hyd[2] == "0" {
		t.Fatalf("the master did not come back with queued tasks (queue before the kill %d):\n%s", before.Queue, c.logs())
	}
	unknown := 0
	for _, id := range ids {
		st := waitTask(t, base, "master", id) // through the daemon's pass-through
		switch st.Status {
		case "done":
		case "unknown_outcome":
			unknown++
		default:
			t.Errorf("task %s: %+v", id, st)
		}
	}
	counts := countLines(t, filepath.Join(data, "agents", "master", "artifacts", "out.txt"))
	for _, id := range ids {
		if counts["line "+id] > 1 {
			t.Errorf("task %s ran %d times", id, counts["line "+id])
		}
	}
	if len(counts) < n-unknown || unknown > 1 {
		t.Errorf("%d lines, %d unknown outcomes, of %d tasks", len(counts), unknown, n)
	}
	t.Logf("master killed at tick %s with %s tasks queued, restarted (pid %d → %d); %d tasks done, %d unknown_outcome",
		hyd[1], hyd[2], m.PID, m2.PID, n-unknown, unknown)
}

// TestDaemonKilledNoOrphans: SIGKILL on the daemon takes its agents down.
func TestDaemonKilledNoOrphans(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	cl, err := control.Discover(data)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w9"}); err != nil {
		t.Fatal(err)
	}
	st := daemonStatus(t, data)
	var pids []int
	for _, a := range st.Agents {
		if a.State != control.StateRunning || a.PID == 0 {
			t.Fatalf("%+v", a)
		}
		pids = append(pids, a.PID)
	}
	if len(pids) != 2 {
		t.Fatalf("%+v", st.Agents)
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	for _, pid := range pids {
		wait.For(t, 10*time.Second, fmt.Sprintf("agent pid %d gone with the daemon", pid), func() bool { return pidGone(pid) })
	}
	// The next daemon boots on the same directory and restores the worker.
	c2 := startDaemon(t, daemonConfig(t, data, ""))
	c2.waitLog(`"restored_workers":1`, 5*time.Second)
	waitAgent(t, data, "w9", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
}

// TestDaemonSecondStartRefused: one daemon per data directory; and the
// store's lock refuses a second process for a running agent.
func TestDaemonSecondStartRefused(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "")
	startDaemon(t, cfg)
	out, code := runCLI(t, "start", "--config", cfg)
	if code != exitLocked || !strings.Contains(out, "another daemon is running on this data directory (pid ") {
		t.Fatalf("second start: %d\n%s", code, out)
	}
	out, code = runCLI(t, "run", "--agent", "master", "--data", data, "--listen", "", "--no-mqtt")
	if code != exitLocked || !strings.Contains(out, "locked by another process") {
		t.Fatalf("second master by hand: %d\n%s", code, out)
	}
}

// masterTemplate is a master that may spawn workers (agent_manager).
const masterTemplate = `{"name": "master", "version": "1.1.0", "role": "master", "brain": {"provider": "echo"},
 "system_prompt": "You are the master.", "tools": ["file_append", "sleep_ms", "agent_manager"],
 "context_budget": {"max_messages": 200}, "workers": ["worker"]}
`

func writeTemplate(t *testing.T, data, name, body string) {
	t.Helper()
	dir := filepath.Join(data, "templates")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonAgentManager: a master's task calls agent_manager; the daemon
// spawns a worker process, hands it the task, and its result comes back
// to the master as a worker_result task.
func TestDaemonAgentManager(t *testing.T) {
	data := dataDir(t)
	writeTemplate(t, data, "master", masterTemplate)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	task := `{"task_id":"delegate-1","input":{"call":[{"tool":"agent_manager","args":{"action":"spawn","template":"worker",` +
		`"agent_id":"w1","task":{"task_id":"wt1","input":"hello from the worker"}}}]}}`
	if code, body, err := postTask(t.Context(), base, "master", []byte(task)); err != nil || code != 202 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	st := waitTask(t, base, "master", "delegate-1")
	if st.Status != "done" || !strings.Contains(string(st.Output), `"agent_id":"w1"`) || !strings.Contains(string(st.Output), `"result_task_id":"worker_result:w1:wt1"`) {
		t.Fatalf("spawn task: %+v %s", st, st.Output)
	}
	w := waitAgent(t, data, "w1", 10*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
	if w.Role != "worker" || w.Requester != "master" || pidGone(w.PID) {
		t.Fatalf("worker %+v", w)
	}
	res := waitTask(t, base, "master", "worker_result:w1:wt1")
	if res.Status != "done" || !strings.Contains(string(res.Output), `"worker":"w1"`) || !strings.Contains(string(res.Output), "hello from the worker") {
		t.Fatalf("worker result at the master: %+v %s", res, res.Output)
	}
	// list and stop through the tool too.
	task = `{"task_id":"delegate-2","input":{"call":[{"tool":"agent_manager","args":{"action":"list"}},` +
		`{"tool":"agent_manager","args":{"action":"stop","agent_id":"w1"}}]}}`
	if code, body, err := postTask(t.Context(), base, "master", []byte(task)); err != nil || code != 202 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	st = waitTask(t, base, "master", "delegate-2")
	if st.Status != "done" || !strings.Contains(string(st.Output), `\"id\": \"w1\"`) && !strings.Contains(string(st.Output), `"id":"w1"`) {
		t.Fatalf("list/stop: %+v %s", st, st.Output)
	}
	wait.For(t, 10*time.Second, "worker process gone", func() bool { return pidGone(w.PID) })
	if _, ok := agentInfo(daemonStatus(t, data), "w1"); ok {
		t.Fatal("stopped worker still listed")
	}
}

// TestDaemonCrashloop: a master whose store cannot open exits at once; it
// ends in crashloop, and a restart by hand reports the error.
func TestDaemonCrashloop(t *testing.T) {
	data := dataDir(t)
	writeTemplate(t, data, "master", strings.Replace(masterTemplate, `"workers"`, `"storage": "nope://x", "workers"`, 1))
	cfg := daemonConfig(t, data, "supervise:\n  backoff_initial: 20ms\n  backoff_max: 100ms\n  crashloop_restarts: 2\n  crashloop_window: 1m\n")
	c := startChild(t, false, "start", "--config", cfg)
	c.waitLog("phase 3/4 master NOT online", 30*time.Second)
	c.waitLog("agent master is in crashloop", time.Second)
	a, _ := agentInfo(daemonStatus(t, data), "master")
	if a.State != control.StateCrashloop || a.Restarts != 2 || !strings.Contains(a.LastError, "nope") {
		t.Fatalf("%+v", a)
	}
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !strings.Contains(out, "crashloop") {
		t.Fatalf("status (%d):\n%s", code, out)
	}
	out, code = runCLI(t, "agent", "restart", "master", "--data", data)
	if code == 0 || !strings.Contains(out, "nope") {
		t.Fatalf("restart of a broken master: %d\n%s", code, out)
	}
	resp, err := http.Get(c.url() + "/healthz")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	// Fixed on disk: a restart by hand brings it back with the new blueprint.
	writeTemplate(t, data, "master", masterTemplate)
	out, code = runCLI(t, "agent", "restart", "master", "--data", data)
	if code != 0 || !strings.Contains(out, "master: running") {
		t.Fatalf("restart: %d\n%s", code, out)
	}
}

// TestDaemonDesignCache: the first boot fetches the master's template from
// the design layer (and caches it); with the design layer down, the next
// boot comes up from the cache.
func TestDaemonDesignCache(t *testing.T) {
	tdir := t.TempDir()
	copyShipped(t, tdir, "master.json", "worker.json", "echo.json")
	set, err := templateValidator().LoadDir(tdir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(design.NewServer(set, zerolog.Nop()))
	data := dataDir(t)
	cfg := daemonConfig(t, data, fmt.Sprintf("design:\n  url: %s\n  timeout: 1s\n  retries: 0\n", srv.URL))
	c := startDaemon(t, cfg)
	if !regexp.MustCompile(`"source":"remote"[^\n]*phase 2/4 design layer ready`).MatchString(c.logs()) {
		t.Fatalf("first boot not from the design layer:\n%s", c.logs())
	}
	// The agent reports where the daemon found its template, not "local"
	// (the frozen file it reads); no degraded boot.
	if src := templateSourceVar(t, c.url()); src != "remote" {
		t.Errorf("first boot: the master's template_source is %q, want remote", src)
	}
	if a, _ := agentInfo(daemonStatus(t, data), "master"); a.Degraded || a.TemplateVersion != "1.0.0" {
		t.Errorf("first boot: %+v", a)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := c.wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("stop: %d %v", code, err)
	}
	srv.Close()
	c = startDaemon(t, cfg)
	logs := c.logs()
	if !regexp.MustCompile(`"source":"cache"[^\n]*phase 2/4 design layer ready`).MatchString(logs) || !strings.Contains(logs, "phase 3/4 master online") {
		t.Fatalf("second boot not from the cache:\n%s", logs)
	}
	a, _ := agentInfo(daemonStatus(t, data), "master")
	if a.Source != "cache" || !a.Degraded || !strings.Contains(a.DegradedReason, "design layer unreachable: booting cached template master 1.0.0") {
		t.Fatalf("%+v", a)
	}
	// The degraded boot is visible without the journal: status, /healthz
	// (still 200: the daemon works on its last good blueprint), and the
	// agent's own template_source.
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !regexp.MustCompile(`(?m)^degraded: master runs template master 1\.0\.0 from the cache: design layer unreachable: `).MatchString(out) {
		t.Fatalf("status (%d) does not show the degraded boot:\n%s", code, out)
	}
	code, body := api(t, "GET", c.url()+"/healthz", nil)
	var h struct {
		Status    string
		Templates map[string]struct{ Name, Version, Source string }
		Degraded  []string
	}
	if code != 200 || json.Unmarshal(body, &h) != nil || h.Status != "ok" || h.Templates["master"].Source != "cache" ||
		h.Templates["master"].Version != "1.0.0" || len(h.Degraded) != 1 || !strings.HasPrefix(h.Degraded[0], "master: design layer unreachable") {
		t.Fatalf("healthz %d %s", code, body)
	}
	if src := templateSourceVar(t, c.url()); src != "cache" {
		t.Errorf("degraded boot: the master's template_source is %q, want cache", src)
	}
}

// templateSourceVar is the master's working variable template_source.
func templateSourceVar(t *testing.T, base string) string {
	t.Helper()
	var snap struct {
		Memory struct {
			Vars map[string]any `json:"working_variables"`
		} `json:"memory"`
	}
	code, body := api(t, "GET", base+"/agents/master/snapshot", nil)
	if code != 200 || json.Unmarshal(body, &snap) != nil {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	src, _ := snap.Memory.Vars["template_source"].(string)
	return src
}

// TestDaemonWithBroker: the default MQTT infrastructure: the embedded
// broker starts in phase 1 and the master connects to it.
func TestDaemonWithBroker(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, "mqtt:\n  broker_listen: 127.0.0.1:0\n  device: dev1\n"))
	logs := c.logs()
	m := regexp.MustCompile(`embedded broker listening on (127\.0\.0\.1:\d+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no embedded broker:\n%s", logs)
	}
	c.waitLog("mqtt: connected to tcp://"+m[1], 10*time.Second)
	resp, err := http.Get(c.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `openstarry_infra_mqtt_connected{infra="mqtt"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
	out, code := runCLI(t, "task", "send", "--broker", "tcp://"+m[1], "--device", "dev1", "--agent", "master", "--input", "over mqtt", "--wait", "--timeout", "10s")
	if code != 0 || !strings.Contains(out, "over mqtt") {
		t.Fatalf("task over MQTT: %d\n%s", code, out)
	}
	// The daemon publishes the agents' states, retained.
	got := make(chan []byte, 1)
	cl := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + m[1]).SetClientID("test-state"))
	if tok := cl.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	cl.Subscribe("openstarry/dev1/agents/master/state", 1, func(_ paho.Client, msg paho.Message) {
		select {
		case got <- msg.Payload():
		default:
		}
	})
	select {
	case p := <-got:
		if !strings.Contains(string(p), `"state":"running"`) || !strings.Contains(string(p), `"role":"master"`) {
			t.Fatalf("state message %s", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no retained state message")
	}
}

// TestDaemonInterruptionScan: agents whose snapshot was not closed cleanly
// (here: `openstarry run` killed with SIGKILL) are listed at boot with
// their tick and status; the master among them is marked recovered.
func TestDaemonInterruptionScan(t *testing.T) {
	data := dataDir(t)
	for _, id := range []string{"master", "bystander"} {
		c := startChild(t, true, "run", "--agent", id, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
		base := c.url()
		if code, body, err := postTask(t.Context(), base, id, []byte(`{"task_id":"t1","input":"x"}`)); err != nil || code != 202 {
			t.Fatalf("%d %s %v", code, body, err)
		}
		waitTask(t, base, id, "t1")
		c.kill()
	}
	c := startDaemon(t, daemonConfig(t, data, ""))
	for _, id := range []string{"master", "bystander"} {
		c.waitLog(fmt.Sprintf("abnormal interruption: agent %s at tick 1 status WAITING_FOR_EVENT", id), time.Second)
	}
	st := daemonStatus(t, data)
	if len(st.Interrupted) != 2 {
		t.Fatalf("%+v", st.Interrupted)
	}
	a, _ := agentInfo(st, "master")
	if !a.Recovered || a.State != control.StateRunning {
		t.Fatalf("%+v", a)
	}
	if _, ok := agentInfo(st, "bystander"); ok {
		t.Fatal("an agent the daemon does not run was spawned")
	}
	out, _ := runCLI(t, "status", "--data", data)
	if !strings.Contains(out, "running (recovered)") || !strings.Contains(out, "bystander at tick 1, status WAITING_FOR_EVENT") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestStartBadConfig: an unknown key is an error naming it.
func TestStartBadConfig(t *testing.T) {
	cfg := daemonConfig(t, dataDir(t), "design:\n  urll: http://x\n")
	out, code := runCLI(t, "start", "--config", cfg)
	if code != 1 || !strings.Contains(out, `unknown key "design.urll" (keys of design: url, timeout, retries, trusted_keys, allow_unsigned_commands, templates)`) {
		t.Fatalf("%d\n%s", code, out)
	}
	out, code = runCLI(t, "start", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 1 || !strings.Contains(out, "no such file") {
		t.Fatalf("%d\n%s", code, out)
	}
}

func TestStatusTable(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := &control.Status{PID: 10, Version: "1.2.3", Data: "/var/lib/openstarry", Started: now.Add(-3 * time.Minute), HTTP: "http://127.0.0.1:7777",
		Phases: []control.Phase{{N: 1, Name: "infrastructure", DurationMs: 4.2}, {N: 3, Name: "master", DurationMs: 20}},
		Agents: []control.AgentInfo{
			{ID: "master", Role: "master", Template: "master", TemplateVersion: "1.0.0", Source: "cache", Degraded: true,
				DegradedReason: "design layer unreachable: booting cached template master 1.0.0 fetched 2h0m ago: connection refused", PID: 11, State: "running", Since: now.Add(-time.Minute), Snapshot: true, Tick: 42, Queue: 1, Restarts: 1, LastError: "signal: killed"},
			{ID: "worker-1", Role: "worker", Template: "worker", State: "crashloop", Since: now.Add(-2 * time.Second), Restarts: 5, LastError: "exit status 1: boom"},
		},
		Interrupted: []control.Interruption{{AgentID: "master", Tick: 41, Status: "THINKING"}},
	}
	var b strings.Builder
	printStatus(&b, st, now)
	want := `daemon pid 10, version 1.2.3, up 3m0s, data /var/lib/openstarry, http http://127.0.0.1:7777
boot: 1 infrastructure 4.2ms · 3 master 20.0ms

AGENT     ROLE    TEMPLATE      PID  STATE      TICK  QUEUE  RESTARTS  SINCE  SOURCE  LAST ERROR
master    master  master@1.0.0  11   running    42    1      1         1m0s   cache   signal: killed
worker-1  worker  worker        -    crashloop  -     -      5         2s     -       exit status 1: boom
degraded: master runs template master 1.0.0 from the cache: design layer unreachable: booting cached template master 1.0.0 fetched 2h0m ago: connection refused

interrupted at boot (snapshot not closed cleanly):
  master at tick 41, status THINKING
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestDaemonDeviceStatus: under the daemon, the device's retained status
// is the daemon's: online with its running agents; an agent that stops
// changes the list, not the device's state; the daemon killed leaves
// offline (its last will) on a hub that outlives it.
func TestDaemonDeviceStatus(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, "mqtt:\n  broker: "+m.URL()+"\n  device: dev1\n"))
	c.waitLog("mqtt: connected to "+m.URL(), 10*time.Second)
	topic := "openstarry/dev1/status"
	wait.For(t, 10*time.Second, "device online with the master", retainedStatus(t, m.URL(), topic, `"state":"online"`, `"agents":["master"]`))

	if out, code := runCLI(t, "agent", "stop", "master", "--data", data); code != 0 {
		t.Fatalf("agent stop: %d\n%s", code, out)
	}
	wait.For(t, 10*time.Second, "device online without agents", retainedStatus(t, m.URL(), topic, `"state":"online"`, `"agents":[]`))

	c.kill()
	wait.For(t, 10*time.Second, "device offline (the daemon's last will)",
		retainedStatus(t, m.URL(), topic, `"state":"offline"`, `"reason":"connection lost"`))
}

// TestDaemonConsoleLog: with --log-format console the agents' lines are
// written in the console format too, not as the JSON they arrive in.
func TestDaemonConsoleLog(t *testing.T) {
	data := dataDir(t)
	c := startChild(t, false, "start", "--config", daemonConfig(t, data, ""), "--log-format", "console")
	c.waitLog("boot complete", 30*time.Second)
	c.waitLog("starting agent", 10*time.Second)
	for _, line := range strings.Split(c.logs(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			t.Fatalf("a JSON line in the console log: %s", line)
		}
		if strings.Contains(line, "starting agent") && !strings.Contains(line, "agent=") {
			t.Fatalf("the agent's line lacks its fields: %s", line)
		}
	}
}

// TestDaemonEphemeralWorker: a worker whose template is ephemeral is retired
// once its result reached the master: its process stops, its snapshot is
// deleted, it leaves the status; the master's snapshot stays.
func TestDaemonEphemeralWorker(t *testing.T) {
	data := dataDir(t)
	writeTemplate(t, data, "master", strings.Replace(masterTemplate, `"workers": ["worker"]`, `"workers": ["worker", "scratch"]`, 1))
	writeTemplate(t, data, "scratch", `{"name": "scratch", "version": "1.0.0", "role": "worker", "brain": {"provider": "echo"},
 "system_prompt": "", "tools": ["sleep_ms"], "context_budget": {"max_messages": 20}, "ephemeral": true}`)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	task := `{"task_id":"delegate-e","input":{"call":[{"tool":"agent_manager","args":{"action":"spawn","template":"scratch",` +
		`"agent_id":"e1","task":{"task_id":"et1","input":"short-lived"}}}]}}`
	if code, body, err := postTask(t.Context(), base, "master", []byte(task)); err != nil || code != 202 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	if st := waitTask(t, base, "master", "delegate-e"); st.Status != "done" {
		t.Fatalf("spawn: %+v", st)
	}
	res := waitTask(t, base, "master", "worker_result:e1:et1")
	if res.Status != "done" || !strings.Contains(string(res.Output), "short-lived") {
		t.Fatalf("worker result at the master: %+v %s", res, res.Output)
	}
	c.waitLog("ephemeral worker e1 retired", 20*time.Second)
	if _, ok := agentInfo(daemonStatus(t, data), "e1"); ok {
		t.Fatal("retired worker still listed")
	}
	if _, err := os.Stat(filepath.Join(data, "agents", "e1", "state.db")); !os.IsNotExist(err) {
		t.Fatalf("the ephemeral worker's snapshot is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "agents", "master", "state.db")); err != nil {
		t.Fatalf("the master's snapshot: %v", err)
	}
	// A master cannot be ephemeral.
	bad := filepath.Join(t.TempDir(), "master.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(masterTemplate, `"role": "master",`, `"role": "master", "ephemeral": true,`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "templates", "validate", bad); code != 1 || !strings.Contains(out, "ephemeral_master") {
		t.Fatalf("ephemeral master: %d\n%s", code, out)
	}
}

// TestDaemonStateStore: phase 1 checks the snapshot store before any agent.
// A Redis that does not fsync every write is reported in status and
// /healthz; a Redis that is down stops the boot in phase 1 with one clear
// line, and no agent is spawned to crash-loop on it.
func TestDaemonStateStore(t *testing.T) {
	srv := redistest.Start(t, "everysec")
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, "store: \""+srv.URL("os-test:")+"\"\n"))
	st := daemonStatus(t, data)
	if st.StateStore == nil || st.StateStore.Durable || !strings.Contains(st.StateStore.Warning, "appendfsync everysec") {
		t.Fatalf("state store in status: %+v", st.StateStore)
	}
	resp, err := httpc.Get(c.url() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`"state_store":\s*"not durable: appendonly`).Match(body) {
		t.Fatalf("healthz: %s", body)
	}
	out, _ := runCLI(t, "status", "--data", data)
	if !strings.Contains(out, "state store: redis://127.0.0.1:") || !strings.Contains(out, "NOT durable") {
		t.Fatalf("status:\n%s", out)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := c.wait(30 * time.Second); code != 0 || err != nil {
		t.Fatalf("stop: %d %v", code, err)
	}

	srv.Kill()
	c2 := startChild(t, false, "start", "--config", daemonConfig(t, data, "store: \""+srv.URL("os-test:")+"\"\n"))
	code, err := c2.wait(60 * time.Second)
	logs := c2.logs()
	if err != nil || code != 1 {
		t.Fatalf("boot with Redis down: exit %d %v\n%s", code, err, logs)
	}
	if !strings.Contains(logs, "phase 1/4: the state store redis://127.0.0.1:") || strings.Contains(logs, "spawning the master") {
		t.Fatalf("boot with Redis down did not stop in phase 1 with the reason:\n%s", logs)
	}
	if strings.Contains(logs, "pool.go") {
		t.Fatalf("the Redis client's own log line leaked:\n%s", logs)
	}
}

// TestDaemonSubmitAndWait: through the daemon's listener, a POST with
// ?wait answers with the task's result; no client polls.
func TestDaemonSubmitAndWait(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	req, _ := http.NewRequest("POST", c.url()+"/agents/master/tasks?wait=10s", strings.NewReader(`{"task_id":"sw1","input":"through the daemon"}`))
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st taskState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 || st.Status != "done" || string(st.Output) != `"through the daemon"` {
		t.Fatalf("POST ?wait through the daemon: %d %+v %v", resp.StatusCode, st, err)
	}
}

// TestDaemonBootNotice: what the image's first boot could not do
// (DATA/boot-notice, packaging/image) is logged after boot complete and
// shown by openstarry status, as text and as JSON.
func TestDaemonBootNotice(t *testing.T) {
	data := dataDir(t)
	const notice = `openstarry.yaml on the boot partition is not valid, the daemon keeps its previous configuration: unknown key "mqtt.brokr"`
	if err := os.WriteFile(filepath.Join(data, "boot-notice"), []byte(notice+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startDaemon(t, daemonConfig(t, data, ""))
	c.waitLog("the first boot reported a problem", 30*time.Second)
	if st := daemonStatus(t, data); st.Notice != notice {
		t.Errorf("status notice %q, want %q", st.Notice, notice)
	}
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !strings.Contains(out, "notice from the first boot: "+notice+"\n") {
		t.Errorf("openstarry status (exit %d) does not show the notice:\n%s", code, out)
	}
}
