//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// simDevice is one daemon of the fleet simulation.
type simDevice struct {
	id, cfg, data string
	d             *child
}

// TestFleetSim: a fleet of real daemons (OPENSTARRY_FLEET_SIM_N, default 4;
// make fleet-sim runs 100), each with its own device id and data
// directory, against one real Mosquitto on loopback. It boots them all and
// checks that fleet status lists every device with its agents and version;
// publishes 20 fleet tasks per device (OPENSTARRY_FLEET_SIM_TASKS) from one
// client, then as many direct tasks per device, then as many fleet tasks per
// device again while a fifth of
// the devices are SIGKILLed at random instants and restarted, and one more
// (with 3 devices or more) is down for good: SIGKILLed whole, daemon and
// master, before them, and never restarted (its session keeps its share of
// the fleet topic; the test publishes again, every 2 s, what no device
// claimed, as task send --fleet does). Every task
// runs exactly once fleet-wide (the claims and each agent's ledger decide:
// every result of a task id names one execution, device and tick) and
// every result reaches the hub. It prints the figures of docs/fleet.md.
func TestFleetSim(t *testing.T) {
	n := 4
	if v := os.Getenv("OPENSTARRY_FLEET_SIM_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			t.Fatalf("OPENSTARRY_FLEET_SIM_N=%q: want a number ≥ 2", v)
		}
	}
	perDevice := 20
	if v := os.Getenv("OPENSTARRY_FLEET_SIM_TASKS"); v != "" {
		var err error
		if perDevice, err = strconv.Atoi(v); err != nil || perDevice < 1 {
			t.Fatalf("OPENSTARRY_FLEET_SIM_TASKS=%q: want a number ≥ 1", v)
		}
	}
	// No persistence: Mosquitto would save its whole state at every retained
	// claim loaded (the tests' autosave_on_changes), and it is never restarted here.
	// set_tcp_nodelay and max_inflight_messages as packaging/mosquitto/hub.conf
	// ships them. With Mosquitto's default, Nagle's algorithm holds a
	// packet sent behind another until the device acknowledges the first,
	// which it delays up to 40 ms: a claim (its PUBACK, then its echo)
	// waited that long (go test -bench BenchmarkClaimOne ./transport/fleet/),
	// which batched the claims and slowed direct tasks too (docs/fleet.md).
	// OPENSTARRY_FLEET_SIM_NAGLE=1 leaves Nagle's algorithm on.
	extra := []string{"sys_interval 1", "max_connections -1", "max_inflight_messages 1000", "set_tcp_nodelay true"}
	if os.Getenv("OPENSTARRY_FLEET_SIM_NAGLE") == "1" {
		extra = extra[:3]
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{NoPersistence: true, Extra: extra})
	sys := mqtttest.Collect(t, m.URL(), "sim-sys", true, "$SYS/broker/publish/messages/sent", "$SYS/broker/clients/connected")
	sysValue := func(topic string) int64 {
		msgs := sys.Messages(topic)
		if len(msgs) == 0 {
			return -1
		}
		v, _ := strconv.ParseInt(string(msgs[len(msgs)-1].Payload), 10, 64)
		return v
	}
	// settledSent is the hub's count of messages sent once it stopped
	// moving (but for the $SYS messages to sim-sys itself).
	settledSent := func() int64 {
		last := int64(-1)
		stable := 0
		wait.For(t, 120*time.Second, "the hub to go quiet", func() bool {
			time.Sleep(1100 * time.Millisecond)
			v := sysValue("$SYS/broker/publish/messages/sent")
			if last >= 0 && v-last <= 2 {
				stable++
			} else {
				stable = 0
			}
			last = v
			return stable >= 2
		})
		return last
	}
	results := mqtttest.Collect(t, m.URL(), "sim-results", false, "openstarry/+/agents/+/results")

	// A day's retained state on the hub: done claims of tasks gone by
	// (OPENSTARRY_FLEET_SIM_RETAINED of them; make fleet-sim: 1,500,000,
	// 17 fleet tasks/s for 24 hours). No device may need them.
	var retained int
	if v := os.Getenv("OPENSTARRY_FLEET_SIM_RETAINED"); v != "" {
		var err error
		if retained, err = strconv.Atoi(v); err != nil || retained < 0 {
			t.Fatalf("OPENSTARRY_FLEET_SIM_RETAINED=%q: want a number", v)
		}
	}
	retainedTook := loadRetainedClaims(t, m.URL(), retained)

	// Boot.
	devs := make([]*simDevice, n)
	bootStart := time.Now()
	var wg sync.WaitGroup
	for i := range devs {
		id := fmt.Sprintf("sim-%03d", i)
		data := dataDir(t)
		devs[i] = &simDevice{id: id, data: data, cfg: daemonConfig(t, data, "mqtt:\n  broker: "+m.URL()+"\n  device: "+id+"\n  telemetry_interval: 5s\n")}
		devs[i].d = startChild(t, false, "start", "--config", devs[i].cfg)
	}
	for _, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.d.waitLog("fleet: connected for the claims", time.Duration(30+n)*time.Second)
		}()
	}
	wg.Wait()
	bootTook := time.Since(bootStart)

	// fleet status lists every device with its agents and version.
	var statusTook time.Duration
	wait.For(t, 60*time.Second, "fleet status to list every device online with its master", func() bool {
		st := time.Now()
		out, code := runCLI(t, "fleet", "status", "--broker", m.URL(), "--json", "--wait", "2s")
		statusTook = time.Since(st)
		var views []fleet.DeviceView
		if code != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &views) != nil || len(views) != n {
			return false
		}
		for _, v := range views {
			if v.State != "online" || v.Telemetry == nil || v.Telemetry.Version == "" || len(v.Telemetry.Agents) != 1 ||
				v.Telemetry.Agents[0].ID != "master" || v.Telemetry.Agents[0].State != "running" {
				return false
			}
		}
		return true
	})
	connections := sysValue("$SYS/broker/clients/connected")

	pub := mqttPublisher(t, m.URL())
	publish := func(topic string, ids []string) {
		toks := make([]paho.Token, 0, len(ids))
		for _, id := range ids {
			toks = append(toks, pub.Publish(topic, 1, false, mqttTask(id, id)))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
	}
	// executions: task id → the distinct executions (device@tick) among
	// the results of the task ids with prefix.
	executions := func(prefix string) map[string]map[string]bool {
		out := map[string]map[string]bool{}
		for _, msg := range results.Messages("") {
			var r struct {
				TaskID    string `json:"task_id"`
				Status    string `json:"status"`
				TickIndex uint64 `json:"tick_index"`
			}
			if json.Unmarshal(msg.Payload, &r) != nil || !strings.HasPrefix(r.TaskID, prefix) {
				continue
			}
			if r.Status != "done" {
				t.Errorf("task %s: %s", r.TaskID, msg.Payload)
			}
			if out[r.TaskID] == nil {
				out[r.TaskID] = map[string]bool{}
			}
			out[r.TaskID][strings.Split(msg.Topic, "/")[1]+"@"+strconv.FormatUint(r.TickIndex, 10)] = true
		}
		return out
	}
	// latency is the time from start to the first result of each task id
	// with prefix (and to its first running claim, for fleet tasks, from
	// claims): its median, 90th percentile and maximum.
	latency := func(c *mqtttest.Collector, prefix string, start time.Time, claim bool) string {
		first := map[string]time.Time{}
		for _, msg := range c.Messages("") {
			var r struct {
				TaskID string `json:"task_id"`
				State  string `json:"state"`
			}
			if json.Unmarshal(msg.Payload, &r) != nil || !strings.HasPrefix(r.TaskID, prefix) || (claim && r.State != fleet.ClaimRunning) {
				continue
			}
			if at, ok := first[r.TaskID]; !ok || msg.At.Before(at) {
				first[r.TaskID] = msg.At
			}
		}
		ds := make([]time.Duration, 0, len(first))
		for _, at := range first {
			ds = append(ds, at.Sub(start))
		}
		if len(ds) == 0 {
			return "none"
		}
		slices.Sort(ds)
		r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		return fmt.Sprintf("%s/%s/%s", r(ds[len(ds)/2]), r(ds[len(ds)*9/10]), r(ds[len(ds)-1]))
	}
	ids := func(prefix string) []string {
		out := make([]string, n*perDevice)
		for i := range out {
			out[i] = fmt.Sprintf("%s%05d", prefix, i)
		}
		return out
	}
	// runAll waits for a result of every task with prefix. It reads only
	// the results that came since it last looked: parsing them all at
	// every look took the test a good part of a processor, which the
	// phases measured here need.
	runAll := func(prefix string, timeout time.Duration) time.Duration {
		start := time.Now()
		got := map[string]bool{}
		next := 0
		mark := []byte(`"` + prefix)
		wait.For(t, timeout, "a result for every "+prefix+" task", func() bool {
			msgs := results.MessagesFrom(next)
			next += len(msgs)
			for _, msg := range msgs {
				var r struct {
					TaskID string `json:"task_id"`
				}
				if bytes.Contains(msg.Payload, mark) && json.Unmarshal(msg.Payload, &r) == nil && strings.HasPrefix(r.TaskID, prefix) {
					got[r.TaskID] = true
				}
			}
			return len(got) == n*perDevice
		})
		return time.Since(start)
	}
	checkOnce := func(prefix string) map[string]int {
		per := map[string]int{}
		for id, ex := range executions(prefix) {
			if len(ex) != 1 {
				t.Errorf("task %s ran %d times: %v", id, len(ex), ex)
			}
			for k := range ex {
				per[strings.Split(k, "@")[0]]++
			}
		}
		return per
	}

	// cpu is the processor time the devices (daemons and their agents) and
	// the hub have used so far.
	cpu := func() (all, hub time.Duration) {
		hub = procCPU(m.PID())
		all = hub
		for _, d := range devs {
			all += treeCPU(d.d.cmd.Process.Pid)
		}
		return all, hub
	}
	perTask := func(d time.Duration, tasks int) float64 { return float64(d.Microseconds()) / 1000 / float64(tasks) }
	// switches is how many times the devices' threads (daemons and
	// agents) gave up or were taken off a processor so far: each wake-up
	// of a goroutine that found its thread asleep costs one.
	switches := func() int64 {
		var total int64
		for _, d := range devs {
			total += treeSwitches(d.d.cmd.Process.Pid)
		}
		return total
	}
	// saves is how many snapshot saves the masters made so far (each
	// daemon's /metrics).
	saves := func() int64 {
		var total int64
		const name = `openstarry_agent_save_duration_seconds_count{agent="master"} `
		for _, d := range devs {
			resp, err := http.Get(d.d.url() + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, name); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					total += n
				}
			}
		}
		return total
	}
	// idleRate is the processor time the idle fleet uses per second
	// (telemetry, keep-alives, timers), measured over 2 s: what a phase
	// costs beyond it is what its tasks cost.
	idleRate := func() float64 {
		c0, _ := cpu()
		t0 := time.Now()
		time.Sleep(2 * time.Second)
		c1, _ := cpu()
		return float64(c1-c0) / float64(time.Since(t0))
	}
	beyondIdle := func(used time.Duration, rate float64, took time.Duration) time.Duration {
		return max(0, used-time.Duration(rate*float64(took)))
	}

	// simPhase is what one phase of fleet or direct tasks measured.
	type simPhase struct {
		took           time.Duration
		cpu, hub       time.Duration // processor time of the devices and hub; of the hub
		idle           float64       // processor time per second of the idle fleet before it
		sent, saves    int64         // hub messages sent, the masters' snapshot saves
		switches       int64         // the devices' context switches
		latency, claim string        // from latency
	}
	// run publishes perDevice tasks per device with ids prefix..., to the
	// fleet topic or to each device's master, and waits for their results.
	// With OPENSTARRY_FLEET_SIM_CLAIMS=1 the claims of fleet tasks are
	// watched, to time them (which costs the hub two messages more per
	// task, not counted as the tasks').
	run := func(fleetTasks bool, prefix string) (ph simPhase, per map[string]int) {
		var claimsSeen *mqtttest.Collector
		if fleetTasks && os.Getenv("OPENSTARRY_FLEET_SIM_CLAIMS") == "1" {
			claimsSeen = mqtttest.Collect(t, m.URL(), "sim-claims", true, fleet.ClaimTopic("openstarry", "+"))
		}
		before := settledSent()
		ph.idle = idleRate()
		saves0 := saves()
		list := ids(prefix)
		// Before the clock starts: cpu runs pgrep once per device, which
		// took the phase a few hundred milliseconds at N = 30.
		cpu0, hub0 := cpu()
		sw0 := switches()
		start := time.Now()
		if fleetTasks {
			publish(mqtt.FleetTopic("openstarry"), list)
		} else {
			var dwg sync.WaitGroup
			for i, d := range devs {
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					publish("openstarry/"+d.id+"/agents/master/tasks", list[i*perDevice:(i+1)*perDevice])
				}()
			}
			dwg.Wait()
		}
		runAll(prefix, time.Duration(120+n*3)*time.Second)
		ph.took = time.Since(start)
		ph.cpu, ph.hub = cpu()
		ph.switches = switches() - sw0
		ph.cpu, ph.hub = ph.cpu-cpu0, ph.hub-hub0
		ph.saves = saves() - saves0
		per = checkOnce(prefix)
		ph.sent = settledSent() - before
		ph.claim = "not watched"
		if claimsSeen != nil {
			ph.sent -= int64(len(claimsSeen.Messages("")))
			claimsSeen.Client.Disconnect(50)
			ph.claim = latency(claimsSeen, prefix, start, true)
		}
		ph.latency = latency(results, prefix, start, false)
		return ph, per
	}

	// Fleet tasks, then direct tasks to each device's master, in turn
	// OPENSTARRY_FLEET_SIM_ROUNDS times (default 1): on a machine that
	// runs other work, each kind then meets the same load.
	rounds := 1
	if v := os.Getenv("OPENSTARRY_FLEET_SIM_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("OPENSTARRY_FLEET_SIM_ROUNDS=%q: want a number ≥ 1", v)
		}
	}
	var fleetPhases, directPhases []simPhase
	var perFleet map[string]int
	for r := range rounds {
		fp, per := run(true, fmt.Sprintf("fa%d-", r))
		if r == 0 {
			perFleet = per
		}
		dp, _ := run(false, fmt.Sprintf("da%d-", r))
		fleetPhases, directPhases = append(fleetPhases, fp), append(directPhases, dp)
	}

	// Resident memory per device: the daemon and its agent.
	var rss int64
	for _, d := range devs {
		rss += treeRSS(t, d.d.cmd.Process.Pid)
	}

	// Fleet tasks while a fifth of the devices are SIGKILLed and restarted,
	// and one more is down for good.
	kills := max(1, n/5)
	perm := rand.Perm(n)
	victims := perm[:kills]
	dead, down := "", 0
	if n >= 3 {
		d := devs[perm[kills]]
		dead, down = d.id, 1
		killWhole(t, d)
	}
	// What a task that ran twice went through: its claims and dead
	// letters, and when each device was killed and back.
	history := mqtttest.Collect(t, m.URL(), "sim-history", true, "openstarry/fleet/claims/#", "openstarry/+/deadletter")
	rp := newRepublisher(t, pub, 2*time.Second)
	tasks := ids("fk-")
	var lastRestart time.Time
	var kmu sync.Mutex
	var killLog []string
	var kwg sync.WaitGroup
	const spread = 4 * time.Second
	phase := time.Now()
	for _, v := range victims {
		kwg.Add(1)
		go func() {
			defer kwg.Done()
			time.Sleep(rand.N(spread))
			d := devs[v]
			killed := time.Since(phase)
			d.d.kill()
			d.d = startChild(t, false, "start", "--config", d.cfg)
			d.d.waitLog("fleet: connected for the claims", 120*time.Second)
			kmu.Lock()
			lastRestart = time.Now()
			killLog = append(killLog, fmt.Sprintf("%s killed at %s, claims connected again at %s", d.id,
				killed.Round(time.Millisecond), time.Since(phase).Round(time.Millisecond)))
			kmu.Unlock()
		}()
	}
	batches := 20
	for b := range batches {
		rp.publish(tasks[b*len(tasks)/batches : (b+1)*len(tasks)/batches])
		time.Sleep(spread / time.Duration(batches))
	}
	kwg.Wait()
	runAll("fk-", time.Duration(300+n*6)*time.Second)
	converge := time.Since(lastRestart)
	perKilled := checkOnce("fk-")
	for id, ex := range executions("fk-") {
		if len(ex) < 2 {
			continue
		}
		t.Logf("task %s ran %d times; devices SIGKILLed: %s; down for good: %s", id, len(ex), strings.Join(killLog, "; "), dead)
		for _, msg := range history.Messages("") {
			if strings.HasSuffix(msg.Topic, "/"+id) || (strings.HasSuffix(msg.Topic, "/deadletter") && strings.Contains(string(msg.Payload), id)) {
				t.Logf("  %s retained=%v %s", msg.Topic, msg.Retained, msg.Payload)
			}
		}
	}
	if dead != "" && perKilled[dead] > 0 {
		t.Errorf("the device down for good, %s, ran %d fleet tasks", dead, perKilled[dead])
	}
	republished := rp.stop()

	t.Logf("per device, fleet tasks without kills (first round): %v", perFleet)
	tasks1 := n * perDevice
	var fleetAll, directAll simPhase
	var fleetBeyond, directBeyond time.Duration
	var ratios []string
	for i := range fleetPhases {
		f, d := fleetPhases[i], directPhases[i]
		fleetAll.took, fleetAll.cpu, fleetAll.hub, fleetAll.idle = fleetAll.took+f.took, fleetAll.cpu+f.cpu, fleetAll.hub+f.hub, fleetAll.idle+f.idle
		fleetAll.sent, fleetAll.saves, fleetAll.switches = fleetAll.sent+f.sent, fleetAll.saves+f.saves, fleetAll.switches+f.switches
		directAll.took, directAll.cpu, directAll.hub, directAll.idle = directAll.took+d.took, directAll.cpu+d.cpu, directAll.hub+d.hub, directAll.idle+d.idle
		directAll.sent, directAll.saves, directAll.switches = directAll.sent+d.sent, directAll.saves+d.saves, directAll.switches+d.switches
		fleetBeyond += beyondIdle(f.cpu, f.idle, f.took)
		directBeyond += beyondIdle(d.cpu, d.idle, d.took)
		ratios = append(ratios, fmt.Sprintf("%.2f", f.took.Seconds()/d.took.Seconds()))
	}
	t.Logf("per device, fleet tasks with kills: %v", perKilled)
	fig := []string{
		fmt.Sprintf("devices: %d (boot of all, to their claims connected: %s)", n, bootTook.Round(10*time.Millisecond)),
		fmt.Sprintf("fleet status: %s for %d devices (with --wait 2s)", statusTook.Round(10*time.Millisecond), n),
		fmt.Sprintf("hub connections: %d (%.1f per device: daemon, master, master's claims; and the test's 3 clients)",
			connections, float64(connections-3)/float64(n)),
		fmt.Sprintf("direct tasks: %d in %s, %.0f tasks/s; %.1f hub messages per task", tasks1*rounds, directAll.took.Round(10*time.Millisecond),
			float64(tasks1*rounds)/directAll.took.Seconds(), float64(directAll.sent)/float64(tasks1*rounds)),
		fmt.Sprintf("fleet tasks: %d in %s, %.0f tasks/s; %.1f hub messages per task", tasks1*rounds, fleetAll.took.Round(10*time.Millisecond),
			float64(tasks1*rounds)/fleetAll.took.Seconds(), float64(fleetAll.sent)/float64(tasks1*rounds)),
		fmt.Sprintf("direct ÷ fleet tasks/s, each round: %s", strings.Join(ratios, ", ")),
		fmt.Sprintf("processor time per task (devices and hub; the hub alone): fleet %.2f ms (%.2f), direct %.2f ms (%.2f); beyond the idle fleet's %.2f cores: fleet %.2f ms, direct %.2f ms",
			perTask(fleetAll.cpu, tasks1*rounds), perTask(fleetAll.hub, tasks1*rounds), perTask(directAll.cpu, tasks1*rounds), perTask(directAll.hub, tasks1*rounds),
			(fleetAll.idle+directAll.idle)/float64(2*rounds), perTask(fleetBeyond, tasks1*rounds), perTask(directBeyond, tasks1*rounds)),
		fmt.Sprintf("time from the publication to the result (median/90th percentile/last), first round: fleet %s (to its claim %s), direct %s",
			fleetPhases[0].latency, fleetPhases[0].claim, directPhases[0].latency),
		fmt.Sprintf("snapshot saves per task (the masters'): fleet %.2f, direct %.2f",
			float64(fleetAll.saves)/float64(tasks1*rounds), float64(directAll.saves)/float64(tasks1*rounds)),
		fmt.Sprintf("context switches per task (the devices' threads): fleet %.1f, direct %.1f",
			float64(fleetAll.switches)/float64(tasks1*rounds), float64(directAll.switches)/float64(tasks1*rounds)),
		fmt.Sprintf("resident memory per device (daemon + master): %.1f MiB", float64(rss)/float64(n)/(1<<20)),
		fmt.Sprintf("fleet tasks with %d devices SIGKILLed and restarted, %d down for good: %d, each run once; %d published again (2s unclaimed); all results %s after the last restart",
			kills, down, len(tasks), republished, converge.Round(10*time.Millisecond)),
	}
	if retained > 0 {
		fig = append(fig, fmt.Sprintf("retained claims on the hub before the boot: %d (published in %s)", retained, retainedTook.Round(time.Second)))
	}
	for _, f := range fig {
		fmt.Println("fleet sim: " + f)
	}
}

// treeRSS is the resident memory of pid and its children, in bytes.
func treeRSS(t *testing.T, pid int) int64 {
	rss := func(p int) int64 {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "status"))
		if err != nil {
			return 0
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		return 0
	}
	return treeSum(pid, rss)
}

// treeSum is of(pid) plus of of each of its children.
func treeSum[T int64 | time.Duration](pid int, of func(int) T) T {
	total := of(pid)
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	if err != nil {
		return total
	}
	for _, f := range strings.Fields(string(out)) {
		if c, err := strconv.Atoi(f); err == nil {
			total += of(c)
		}
	}
	return total
}

// procCPU is the processor time (user and system) pid has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// After the command's closing parenthesis: state (field 3) ... utime
	// (14), stime (15), in clock ticks (USER_HZ, 100 on Linux).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// procSwitches is the context switches of every thread of process pid,
// voluntary and not, from /proc/PID/task/*/status; 0 where there is no
// /proc.
func procSwitches(pid int) int64 {
	files, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	var total int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total
}

// treeSwitches is procSwitches of pid and its children.
func treeSwitches(pid int) int64 { return treeSum(pid, procSwitches) }

// treeCPU is the processor time of pid and its children.
func treeCPU(pid int) time.Duration { return treeSum(pid, procCPU) }

// loadRetainedClaims retains n done claims of other tasks on the hub, as a
// day of fleet tasks leaves them, and returns how long that took.
func loadRetainedClaims(t *testing.T, url string, n int) time.Duration {
	if n == 0 {
		return 0
	}
	start := time.Now()
	pc := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("sim-retained").SetProtocolVersion(4).
		SetMaxResumePubInFlight(1000).SetWriteTimeout(time.Minute))
	if tok := pc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer pc.Disconnect(50)
	expires := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	var last paho.Token
	for i := range n {
		id := fmt.Sprintf("old-%08d", i)
		body := fmt.Sprintf(`{"task_id":%q,"device":"gone-%03d","agent":"master","state":"done","expires":%q,"nonce":"%016x"}`,
			id, i%100, expires, i)
		last = pc.Publish(fleet.ClaimTopic("openstarry", id), 0, true, body)
		if i%10000 == 9999 {
			last.WaitTimeout(time.Minute)
		}
	}
	// A QoS 1 publication after them: the hub has taken them all when it
	// acknowledges it (one connection's packets are handled in order).
	if tok := pc.Publish("openstarry/sim/retained-loaded", 1, false, "x"); !tok.WaitTimeout(5*time.Minute) || tok.Error() != nil {
		t.Fatalf("retained claims: %v", tok.Error())
	}
	_ = last
	return time.Since(start)
}

// killWhole SIGKILLs a device's daemon and master as a power cut does: the
// daemon stopped first, so that it neither restarts its master nor lets
// it leave the fleet group.
func killWhole(t *testing.T, d *simDevice) {
	t.Helper()
	master, ok := agentInfo(daemonStatus(t, d.data), "master")
	if !ok || master.PID == 0 {
		t.Fatalf("%s has no master", d.id)
	}
	if err := d.d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(master.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.d.kill()
}

// republisher publishes fleet tasks as task send --fleet does
// (docs/fleet.md, A device that is down): it subscribes to the claim of
// each task before publishing it, and publishes again, every interval,
// the tasks no device has claimed yet.
type republisher struct {
	t      *testing.T
	pc     paho.Client
	done   chan struct{}
	ended  chan struct{}
	mu     sync.Mutex
	open   map[string]bool // published, not claimed yet
	copies int
}

func newRepublisher(t *testing.T, pc paho.Client, interval time.Duration) *republisher {
	r := &republisher{t: t, pc: pc, done: make(chan struct{}), ended: make(chan struct{}), open: map[string]bool{}}
	go func() {
		defer close(r.ended)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-tick.C:
			}
			r.mu.Lock()
			var again []string
			for id := range r.open {
				again = append(again, id)
			}
			r.copies += len(again)
			r.mu.Unlock()
			for _, id := range again {
				r.pc.Publish(mqtt.FleetTopic("openstarry"), 1, false, mqttTask(id, id))
			}
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *republisher) publish(ids []string) {
	subs := map[string]byte{}
	r.mu.Lock()
	for _, id := range ids {
		r.open[id] = true
		subs[fleet.ClaimTopic("openstarry", id)] = 1
	}
	r.mu.Unlock()
	tok := r.pc.SubscribeMultiple(subs, func(_ paho.Client, m paho.Message) {
		var c fleet.Claim
		if json.Unmarshal(m.Payload(), &c) == nil && c.Device != "" {
			r.mu.Lock()
			delete(r.open, c.TaskID)
			r.mu.Unlock()
		}
	})
	if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
		r.t.Fatalf("subscribe to the claims: %v", tok.Error())
	}
	toks := make([]paho.Token, 0, len(ids))
	for _, id := range ids {
		toks = append(toks, r.pc.Publish(mqtt.FleetTopic("openstarry"), 1, false, mqttTask(id, id)))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			r.t.Fatalf("publish: %v", tok.Error())
		}
	}
}

// stop ends the republishing and returns how many copies it published.
func (r *republisher) stop() int {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	<-r.ended
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copies
}
