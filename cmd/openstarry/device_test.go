//go:build unix

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// retainedStatus reads the retained status of device on the broker at url.
func deviceStatus(t *testing.T, url, device string) *mqtt.StatusMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pc, err := mqtt.Dial(ctx, mqtt.DialOptions{Broker: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(50)
	st, err := mqtt.ReadStatus(ctx, pc, "openstarry", device, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOneDeviceManyProcesses: a daemon runs as device dev-1 on a real
// Mosquitto, and an agent run on its own (`openstarry run --agent
// assistant`) joins it with the same device id, as docs/models.md
// suggests. Fleet tasks sent with --wait all come back (the two processes'
// claims connections used to share one client id and take it from each
// other); no client id of the device is ever taken over; the device's
// status stays the daemon's, online with its agents, after the agent stops
// and after someone else's offline message lands on it; a second daemon
// started as dev-1 (another data directory) is refused at start with an
// error naming the first.
func TestOneDeviceManyProcesses(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, "mqtt:\n  broker: "+m.URL()+"\n  device: dev-1\n"))
	d.waitLog("fleet: connected for the claims", 30*time.Second)

	a := startChild(t, true, "run", "--agent", "assistant", "--device", "dev-1", "--listen", "127.0.0.1:0",
		"--data", t.TempDir(), "--broker", m.URL(), "--fleet-workers")
	a.waitLog("fleet: connected for the claims", 30*time.Second)

	for i := range 6 {
		out, code := runCLI(t, "task", "send", "--broker", m.URL(), "--fleet", "--input", fmt.Sprintf("job %d", i),
			"--wait", "--timeout", "30s")
		if code != 0 || !strings.Contains(out, `"status":"done"`) {
			t.Fatalf("fleet task %d: exit %d\n%s\ndaemon:\n%s\nagent:\n%s", i, code, out, d.logs(), a.logs())
		}
	}

	if strings.Contains(m.Logs(), "already connected, closing old connection") {
		t.Fatalf("a client id was taken over:\n%s", m.Logs())
	}
	a.waitLog("owns its status; this agent leaves openstarry/dev-1/status alone", 5*time.Second)
	isDaemons := func(st *mqtt.StatusMessage) bool {
		return st != nil && st.State == "online" && st.Owner == mqtt.OwnerDaemon && slices.Equal(st.Agents, []string{"master"})
	}
	if st := deviceStatus(t, m.URL(), "dev-1"); !isDaemons(st) {
		t.Fatalf("status while both run: %+v", st)
	}
	// The agent stops cleanly: the device is still online, the daemon's.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := a.wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("agent exit %d %v\n%s", code, err, a.logs())
	}
	if st := deviceStatus(t, m.URL(), "dev-1"); !isDaemons(st) {
		t.Fatalf("status after the agent stopped: %+v", st)
	}
	// Another process's offline (a will, an agent of an older version)
	// lands on the status: the daemon puts its own back.
	pub := mqttPublisher(t, m.URL())
	if tok := pub.Publish("openstarry/dev-1/status", 1, true,
		[]byte(`{"state":"offline","device":"dev-1","agents":["assistant"],"reason":"stopped"}`)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	wait.For(t, 20*time.Second, "the daemon's status back on the device", func() bool {
		return isDaemons(deviceStatus(t, m.URL(), "dev-1"))
	})

	// A second daemon as dev-1 is refused, naming the first.
	d2 := startChild(t, false, "start", "--config", daemonConfig(t, dataDir(t), "mqtt:\n  broker: "+m.URL()+"\n  device: dev-1\n"))
	code, err := d2.wait(60 * time.Second)
	if err != nil || code == 0 {
		t.Fatalf("second daemon: exit %d %v\n%s", code, err, d2.logs())
	}
	pid := strconv.Itoa(d.cmd.Process.Pid)
	for _, want := range []string{`openstarry: infrastructure mqtt: device id "dev-1" is already online on the hub: its daemon (pid ` + pid + " on host ",
		"data " + data} {
		if !strings.Contains(d2.logs(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, d2.logs())
		}
	}
	d.waitLog("is starting as device dev-1; this daemon answered, and it refuses to start", 10*time.Second)
	if st := deviceStatus(t, m.URL(), "dev-1"); !isDaemons(st) || st.PID != d.cmd.Process.Pid {
		t.Fatalf("status after the second daemon was refused: %+v", st)
	}
	if strings.Contains(m.Logs(), "already connected, closing old connection") {
		t.Errorf("a client id was taken over:\n%s", m.Logs())
	}
}

// TestFleetGroupMembership: an agent that stops cleanly leaves the fleet
// group, so that the hub does not queue fleet tasks for it while it is away
// (they went to its persistent session and waited for it to come back);
// an agent of a worker template joins the group only with
// --fleet-workers.
func TestFleetGroupMembership(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	col := mqtttest.Collect(t, m.URL(), "observer-group", false, "openstarry/+/agents/+/results")
	var agents []*child
	for _, dev := range []string{"dev-a", "dev-b"} {
		c := startChild(t, true, "run", "--agent", "master", "--template", "master", "--device", dev, "--listen", "127.0.0.1:0",
			"--data", t.TempDir(), "--broker", m.URL())
		c.waitLog("fleet: connected for the claims", 30*time.Second)
		agents = append(agents, c)
	}
	b := agents[1]
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := b.wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("dev-b exit %d %v\n%s", code, err, b.logs())
	}
	if !strings.Contains(b.logs(), "mqtt: left the fleet group") {
		t.Errorf("dev-b did not say it left the fleet group:\n%s", b.logs())
	}
	pub := mqttPublisher(t, m.URL())
	const n = 8
	for i := range n {
		mqtttest.Publish(t, pub, mqtt.FleetTopic("openstarry"), mqttTask(fmt.Sprintf("group-%d", i), i))
	}
	wait.For(t, 60*time.Second, "every fleet task run by the device still there", func() bool {
		return len(col.Messages("openstarry/dev-a/agents/master/results")) >= n
	})

	// Workers: not in the group unless configured.
	w := startChild(t, true, "run", "--agent", "w1", "--template", "worker", "--device", "dev-w", "--listen", "127.0.0.1:0",
		"--data", t.TempDir(), "--broker", m.URL())
	w.waitLog("subscribed to openstarry/dev-w/agents/w1/tasks", 30*time.Second)
	if strings.Contains(w.logs(), "fleet/tasks") {
		t.Errorf("a worker joined the fleet group:\n%s", w.logs())
	}
	w2 := startChild(t, true, "run", "--agent", "w2", "--template", "worker", "--device", "dev-w", "--listen", "127.0.0.1:0",
		"--data", t.TempDir(), "--broker", m.URL(), "--fleet-workers")
	w2.waitLog("subscribed to $share/openstarry/openstarry/fleet/tasks", 30*time.Second)
}
