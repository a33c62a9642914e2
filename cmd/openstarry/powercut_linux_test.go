package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/internal/crashseed"
	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/powercut"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestPowerCut is the torture runner: the real binary runs one agent with
// its data directory on the power-cut simulator (internal/powercut) while
// tasks that call the non-idempotent file_append arrive over HTTP and from
// an MQTT hub (a Mosquitto outside the simulator), alternately; at
// random instants it is SIGKILLed, or power-cut (killed, then everything
// not fsynced dropped, or torn), and started again. At the end every task
// acknowledged (HTTP 202, or the hub's PUBACK) must be done or
// unknown_outcome, its result must have reached the hub once per
// execution, no line appended twice, the tick never behind a result the
// client saw, and the agent never back blank. It runs 30 cycles per store (half of them cuts), and
// 1,000 with OPENSTARRY_TORTURE set (make torture).
//
// The tool's ledger must outlive the cuts, as a side effect on another
// machine would: the agent's artifacts directory is a bind mount of a
// directory outside the simulator, mounted again after every cut.
func TestPowerCut(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	cycles := 30
	if os.Getenv("OPENSTARRY_TORTURE") != "" {
		cycles = 1000
	}
	if s := os.Getenv("OPENSTARRY_POWERCUT_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("OPENSTARRY_POWERCUT_CYCLES: %v", err)
		}
		cycles = n
	}
	// The hub: a Mosquitto outside the simulator, as on another machine.
	hub := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"max_queued_messages 0"}})
	var table []string
	// Every acknowledged task is checked at the end, so the task index
	// keeps them all: a thousand cycles run more tasks than the default
	// retention (10,000), which would answer the oldest with 404.
	for _, store := range []crashStore{
		{"bbolt", "bbolt://?max_tasks=-1"},
		{"sqlite", "sqlite://%s/sqlite/state.db?retention_tasks=-1"}, // in a directory of its own, which the store creates
		{"file", "file://%s/snapshots?retention_tasks=-1"},
	} {
		t.Run(store.name, func(t *testing.T) {
			r := powerCutRun(t, store.url, hub.URL(), cycles)
			table = append(table, fmt.Sprintf("| %-6s | %6d | %5d | %4d | %6d | %4d | %8d | %5d | %7d | %7d |",
				store.name, r.cycles, r.kills, r.cuts, r.tasks, r.lost, r.repeated, r.blank, r.refused, r.unknown))
		})
	}
	t.Logf("\n| store  | cycles | kills | cuts |  tasks | lost | repeated | blank | refused | unknown |\n|--------|--------|-------|------|--------|------|----------|-------|---------|---------|\n%s",
		strings.Join(table, "\n"))
}

// cutReport is what one store's run counted.
type cutReport struct {
	cycles, kills, cuts, tasks int
	lost                       int // acknowledged tasks with no final result
	repeated                   int // lines appended more than once
	blank                      int // restarts that came back with no snapshot after a task was acknowledged
	refused                    int // restarts that exited with a message instead of starting
	unknown                    int // tasks that ended unknown_outcome (allowed)
	torn                       int // cuts that tore a block
}

// tortured is what the torture loop drives: a system under test whose
// data directory is on the simulator.
type tortured struct {
	agentID string // the agent the tasks go to
	art     string // its artifacts directory, where the ledger is bound
	// start starts the system, waits until it takes tasks, and returns the
	// process to kill and the HTTP base URL; ok false when it exited
	// before (its log is in the child).
	start func() (c *child, base string, ok bool)
	// kill kills every process of the system.
	kill func(c *child)
	// hub: tasks are published here every other one, and results are
	// collected here; nil for HTTP only.
	pub paho.Client
	col *mqtttest.Collector
}

// powerCutRun tortures one store; tasks alternate between HTTP and the
// MQTT hub at hubURL.
func powerCutRun(t *testing.T, storeURL, hubURL string, cycles int) cutReport {
	agentID := "pc-" + strings.SplitN(storeURL, ":", 2)[0]
	pc, data, seed := newPowerCutData(t)
	if strings.Contains(storeURL, "%s") {
		storeURL = fmt.Sprintf(storeURL, data)
	}
	args := []string{"run", "--agent", agentID, "--data", data, "--store", storeURL, "--listen", "127.0.0.1:0",
		"--device", mqttDevice, "--broker", hubURL}
	tgt := tortured{
		agentID: agentID,
		art:     filepath.Join(data, "agents", agentID, "artifacts"),
		pub:     mqttPublisher(t, hubURL),
		col:     mqtttest.Collect(t, hubURL, "observer-"+agentID, false, resultsTopic(agentID)),
		kill:    func(c *child) { c.kill() },
	}
	tgt.start = func() (*child, string, bool) {
		c := startChild(t, false, args...)
		select {
		case a := <-c.addr:
			c.addr <- a
			c.waitLog("subscribed to "+tasksTopic(agentID), 20*time.Second)
			return c, a, true
		case <-c.done:
			return c, "", false
		case <-time.After(30 * time.Second):
			t.Fatalf("the agent did not start listening\n%s", c.logs())
		}
		return nil, "", false
	}
	return torture(t, pc, seed, tgt, cycles)
}

// newPowerCutData mounts a simulator with a durable, empty data directory
// on it (the installer's, made durable before the agent ever runs).
func newPowerCutData(t *testing.T) (*powercut.FS, string, uint64) {
	t.Helper()
	seed := crashseed.Seed(t) // the choices of the cuts and of the runner
	pc := powercut.New(t, seed)
	data := filepath.Join(pc.Dir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	syncPath(t, pc.Dir())
	return pc, data, seed
}

// torture runs cycles of: tasks for a random 5 to 65 ms, then a SIGKILL or
// a power cut (dropping or tearing), then a restart; then it checks every
// acknowledged task.
func torture(t *testing.T, pc *powercut.FS, seed uint64, tgt tortured, cycles int) cutReport {
	rng := rand.New(rand.NewPCG(seed, 18))
	ledger := t.TempDir()
	t.Cleanup(func() { unbind(t, tgt.art) })
	agentID := tgt.agentID
	var (
		r        cutReport
		accepted = map[string]bool{}
		viaHub   = map[string]bool{} // acknowledged by the hub, not by the agent
		maxTick  uint64              // the highest tick_index of a result the client saw
		next     int
		c        *child
		base     string
	)
	start := func() bool {
		t.Helper()
		bindLedger(t, ledger, tgt.art)
		var ok bool
		c, base, ok = tgt.start()
		if !ok {
			r.refused++
			t.Errorf("cycle %d: refused to start after %d kills and %d cuts:\n%s", r.cycles, r.kills, r.cuts, c.logs())
			return false
		}
		logs := c.logs()
		if len(accepted) > 0 && strings.Contains(logs, "fresh agent") {
			r.blank++
			t.Errorf("cycle %d: the agent came back blank after %d tasks were acknowledged", r.cycles, len(accepted))
		}
		if m := hydratedRe.FindStringSubmatch(logs); m != nil {
			tick, _ := strconv.ParseUint(m[1], 10, 64)
			if tick < maxTick {
				t.Errorf("cycle %d: hydrated at tick %d, but the client saw the result of tick %d", r.cycles, tick, maxTick)
			}
		}
		return true
	}
	stop := func() {
		tgt.kill(c)
		unbind(t, tgt.art)
	}
	if !start() {
		return r
	}
	for r.cycles < cycles {
		killAt := time.Now().Add(time.Duration(5+rng.IntN(60)) * time.Millisecond)
		for time.Now().Before(killAt) {
			id := fmt.Sprintf("task-%05d", next)
			if next%2 == 1 && tgt.pub != nil {
				// Acknowledged by the hub, which keeps it for the agent's
				// persistent session until the agent has it durable.
				tok := tgt.pub.Publish(tasksTopic(agentID), 1, false, appendTask(id, "tasks.log"))
				if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("publish %s: %v", id, tok.Error())
				}
				accepted[id], viaHub[id] = true, true
				next++
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			code, body, err := postTask(ctx, base, agentID, appendTask(id, "tasks.log"))
			cancel()
			switch {
			case err != nil:
				t.Fatalf("task %s: %v\n%s", id, err, c.logs())
			case code == 202 || code == 200:
				accepted[id] = true
				next++
			default:
				t.Fatalf("task %s: %d %s", id, code, body)
			}
		}
		// What the client knows is durable: the result of a recent task.
		for i := max(0, next-5); i < next; i++ {
			if code, st, err := getTask(base, agentID, fmt.Sprintf("task-%05d", i)); err == nil && code == 200 && st.TickIndex > maxTick {
				maxTick = st.TickIndex
			}
		}
		stop()
		r.cycles++
		if rng.IntN(2) == 0 {
			r.kills++
		} else {
			mode := powercut.Drop
			if rng.IntN(2) == 0 {
				mode = powercut.Tear
			}
			st, err := pc.Cut(mode)
			if err != nil {
				t.Fatal(err)
			}
			r.cuts++
			if st.TornSectors > 0 {
				r.torn++
			}
		}
		if !start() {
			return r
		}
	}

	// Let the last process finish everything, then check every task.
	r.tasks = len(accepted)
	deadline := time.Now().Add(2 * time.Minute)
	ends := map[string]taskEnd{}
	for id := range accepted {
		var code int
		var st taskState
		err := wait.Poll(time.Until(deadline), func() error {
			var err error
			code, st, err = getTask(base, agentID, id)
			if err != nil {
				t.Fatalf("task %s: %v", id, err)
			}
			if code == 200 && (st.Status == "queued" || st.Status == "running") {
				return errors.New(st.Status)
			}
			if code == http.StatusNotFound && viaHub[id] {
				// The hub acknowledged it and delivers it to the agent's
				// persistent session after the last restart: maybe not yet.
				return errors.New("not delivered yet")
			}
			return nil
		})
		if code != 200 || err != nil {
			r.lost++
			t.Errorf("acknowledged task %s is lost: %d %s", id, code, st.Status)
			continue
		}
		ends[id] = taskEnd{st.Status, st.Error}
	}
	if tgt.col != nil {
		// Every result reached the hub, once per execution.
		wait.For(t, time.Minute, "every result at the hub", func() bool {
			return len(mqtttest.Results(t, tgt.col, resultsTopic(agentID))) >= len(accepted)
		})
		published := mqtttest.Results(t, tgt.col, resultsTopic(agentID))
		for id := range accepted {
			switch rs := published[id]; {
			case len(rs) == 0:
				r.lost++
				t.Errorf("the result of task %s never reached the hub", id)
			case runs(rs) != 1:
				r.repeated++
				t.Errorf("task %s ran %d times: %+v", id, runs(rs), rs)
			}
		}
	}
	lines := countLines(t, filepath.Join(ledger, "tasks.log"))
	for id, e := range ends {
		n := lines["line "+id]
		switch {
		case e.status == "unknown_outcome" && n <= 1:
			r.unknown++
		case e.status == "done" && n == 1:
		case n > 1:
		default:
			r.lost++
			t.Errorf("task %s ended %s (%s) with its line appended %d times", id, e.status, e.err, n)
		}
	}
	for line, n := range lines {
		if n > 1 {
			r.repeated++
			t.Errorf("%q appended %d times", line, n)
		}
	}
	stop()
	ps := pc.Stats()
	t.Logf("cycles %d, kills %d, cuts %d (%d torn), tasks %d, lost %d, repeated %d, blank %d, refused-with-message %d; %d unknown_outcome; %d file fsyncs, %d directory fsyncs",
		r.cycles, r.kills, r.cuts, r.torn, r.tasks, r.lost, r.repeated, r.blank, r.refused, r.unknown, ps.FileSyncs, ps.DirSyncs)
	return r
}

func syncPath(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// bindLedger mounts the directory ledger, outside the simulator, over the
// agent's artifacts directory art, creating art if a cut took it.
func bindLedger(t *testing.T, ledger, art string) {
	t.Helper()
	if err := os.MkdirAll(art, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(ledger, art, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s on %s: %v", ledger, art, err)
	}
}

func unbind(t *testing.T, art string) {
	err := syscall.Unmount(art, syscall.MNT_DETACH)
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unmount %s: %v", art, err)
	}
}

// TestPowerCutFirstTask is the regression test of what the torture runner
// found first: a store made its own file durable but not the directories
// it created on the way to it (data/agents, data/snapshots,
// data/sqlite), so a power cut after the first acknowledged tasks took
// the whole store with it and the agent came back blank. Each store here
// gets one task done, then the power is cut (everything not fsynced
// dropped), and the agent must come back with the task.
func TestPowerCutFirstTask(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, store := range []crashStore{
		{"bbolt", "bbolt://"},
		{"sqlite", "sqlite://%s/sqlite/state.db"},
		{"file", "file://%s/snapshots"},
	} {
		t.Run(store.name, func(t *testing.T) {
			const agentID = "first"
			pc, data, _ := newPowerCutData(t)
			url := store.url
			if url != "bbolt://" {
				url = fmt.Sprintf(url, data)
			}
			args := []string{"run", "--agent", agentID, "--data", data, "--store", url, "--listen", "127.0.0.1:0", "--no-mqtt"}
			c := startChild(t, true, args...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code, body, err := postTask(ctx, c.url(), agentID, mqttTask("first-task", "hello"))
			if err != nil || code != 202 {
				t.Fatalf("task: %d %s %v", code, body, err)
			}
			if st := waitTask(t, c.url(), agentID, "first-task"); st.Status != "done" {
				t.Fatalf("the task before the cut: %+v", st)
			}
			c.kill()
			if _, err := pc.Cut(powercut.Drop); err != nil {
				t.Fatal(err)
			}
			c = startChild(t, true, args...)
			base := c.url()
			if strings.Contains(c.logs(), "fresh agent") {
				t.Fatalf("the agent came back blank after the cut:\n%s", c.logs())
			}
			code, st, err := getTask(base, agentID, "first-task")
			if err != nil || code != 200 || st.Status != "done" {
				t.Fatalf("the task after the cut: %d %+v %v", code, st, err)
			}
		})
	}
}

// TestPowerCutDaemon is the torture runner on the daemon: `openstarry
// start` with its embedded broker and its master agent (a process of its
// own), the data directory on the simulator, tasks to the master over the
// daemon's HTTP API. A kill or a cut takes the daemon and the master; the
// next daemon must boot (broker included) and the master come back with
// every acknowledged task. 20 cycles; 300 with OPENSTARRY_TORTURE set.
func TestPowerCutDaemon(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	cycles := 20
	if os.Getenv("OPENSTARRY_TORTURE") != "" {
		cycles = 300
	}
	pc, data, seed := newPowerCutData(t)
	port := loopback.FreePort(t)
	cfg := daemonConfig(t, data, fmt.Sprintf("mqtt:\n  broker_listen: 127.0.0.1:%d\n  device: %s\n", port, mqttDevice))
	var masterPID int
	tgt := tortured{
		agentID: "master",
		art:     filepath.Join(data, "agents", "master", "artifacts"),
	}
	tgt.start = func() (*child, string, bool) {
		c := startChild(t, false, "start", "--config", cfg)
		booted := func() bool { return strings.Contains(c.logs(), "boot complete") }
		if err := wait.Poll(30*time.Second, func() error {
			select {
			case <-c.done:
				return nil
			default:
			}
			if !booted() {
				return errors.New("booting")
			}
			return nil
		}); err != nil {
			t.Fatalf("the daemon did not boot\n%s", c.logs())
		}
		if !booted() {
			return c, "", false // exited before booting
		}
		a := waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
		masterPID = a.PID
		return c, c.url(), true
	}
	// The master's own log goes to the daemon's: its hydration line is
	// there, which the runner reads.
	tgt.kill = func(c *child) {
		c.kill()
		wait.For(t, 10*time.Second, fmt.Sprintf("the master (pid %d) gone with the daemon", masterPID), func() bool {
			return masterPID == 0 || pidGone(masterPID)
		})
	}
	r := torture(t, pc, seed, tgt, cycles)
	t.Logf("\n| daemon | cycles | kills | cuts |  tasks | lost | repeated | blank | refused | unknown |\n| master | %6d | %5d | %4d | %6d | %4d | %8d | %5d | %7d | %7d |",
		r.cycles, r.kills, r.cuts, r.tasks, r.lost, r.repeated, r.blank, r.refused, r.unknown)
}

// TestPowerCutDaemonWorkers: a worker the master spawned is in the
// daemon's registry (DATA/run/registry.json) before the spawn returns; a
// power cut right after must not take the registry, or its directory,
// with it: the next boot restores the worker.
func TestPowerCutDaemonWorkers(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	pc, data, _ := newPowerCutData(t)
	cfg := daemonConfig(t, data, "")
	c := startDaemon(t, cfg)
	cl, err := control.Discover(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w9"}); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	w := waitAgent(t, data, "w9", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
	m := waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
	c.kill()
	wait.For(t, 10*time.Second, "the agents gone", func() bool { return pidGone(w.PID) && pidGone(m.PID) })
	if _, err := pc.Cut(powercut.Drop); err != nil {
		t.Fatal(err)
	}
	c = startDaemon(t, cfg)
	c.waitLog(`"restored_workers":1`, 5*time.Second)
	waitAgent(t, data, "w9", 20*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning })
}
