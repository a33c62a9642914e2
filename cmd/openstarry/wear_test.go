//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestBrokerAckSurvivesKill: a task whose PUBACK the embedded broker sent
// survives a SIGKILL of the process that holds the broker (the daemon), and
// runs exactly once after the restart. The broker writes nothing for a task
// the agent acknowledged in time (the agent's store holds it), and stores
// the ones the agent could not take (here: the agent is stopped) before it
// acknowledges them.
func TestBrokerAckSurvivesKill(t *testing.T) {
	data := dataDir(t)
	port := loopback.FreePort(t)
	cfg := daemonConfig(t, data, fmt.Sprintf("mqtt:\n  broker_listen: 127.0.0.1:%d\n  device: %s\n", port, mqttDevice))
	d := startDaemon(t, cfg)
	url := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	pub := mqttPublisher(t, url)
	topic := tasksTopic("master")
	task := func(id string) []byte {
		return mqttTask(id, map[string]any{"call": []map[string]any{
			{"tool": "file_append", "args": map[string]string{"file": "acked.log", "line": id}}}})
	}
	publish := func(id string) time.Duration {
		start := time.Now()
		mqtttest.Publish(t, pub, topic, task(id))
		return time.Since(start)
	}

	// Taken by the agent, which acknowledges a task once its store holds
	// it: the broker keeps no copy. The daemon is killed right after the
	// last PUBACK, most tasks still queued (the agent, told by the kernel
	// that its parent died, stops at the end of its tick).
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("taken-%d", i)
		publish(id)
		ids = append(ids, id)
	}
	agentPID := masterPID(t, d)
	d.kill()
	wait.For(t, 10*time.Second, "the agent to stop", func() bool { return pidGone(agentPID) })

	// The agent, connected, stopped (SIGSTOP): the broker stores the copies
	// when the hold is over, then acknowledges them.
	d = startDaemon(t, cfg)
	d.waitLog("subscribed to "+topic, 20*time.Second)
	for _, id := range ids { // none cut short by the SIGSTOP below
		waitTask(t, d.url(), "master", id)
	}
	pub = mqttPublisher(t, url)
	agentPID = masterPID(t, d)
	if err := syscall.Kill(agentPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(agentPID, syscall.SIGKILL) })
	for i := range 5 {
		id := fmt.Sprintf("stored-%d", i)
		if took := publish(id); took < 150*time.Millisecond {
			t.Errorf("%s was acknowledged after %s, before the broker's hold was over: with the agent stopped, nothing holds it yet", id, took)
		}
		ids = append(ids, id)
	}
	d.kill()
	if err := syscall.Kill(agentPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the stopped agent to be gone", func() bool { return pidGone(agentPID) })

	d = startDaemon(t, cfg)
	base := d.url()
	states := map[string]string{}
	for _, id := range ids {
		states[id] = waitTask(t, base, "master", id).Status
	}
	wait.Settle(t, 300*time.Millisecond, "a task delivered twice would have run again by now")
	// Each task ran once: done with its line written once, or, for the
	// one a kill cut short inside file_append, an unknown outcome (not run
	// again) with its line written at most once.
	lines := countLines(t, filepath.Join(data, "agents", "master", "artifacts", "acked.log"))
	unknown := 0
	for _, id := range ids {
		switch st := states[id]; {
		case st == "done" && lines[id] == 1:
		case st == "unknown_outcome" && lines[id] <= 1:
			unknown++
		default:
			t.Errorf("task %s: %s, ran %d times", id, st, lines[id])
		}
		delete(lines, id)
	}
	if unknown > 2 {
		t.Errorf("%d unknown outcomes; at most one per kill", unknown)
	}
	if len(lines) != 0 {
		t.Errorf("lines of no task: %v", lines)
	}
}

var masterPIDLogRe = regexp.MustCompile(`"agent":"master","pid":(\d+)`)

// masterPID is the pid of the daemon's master agent, from its log.
func masterPID(t *testing.T, d *child) int {
	t.Helper()
	m := masterPIDLogRe.FindAllStringSubmatch(d.logs(), -1)
	if m == nil {
		t.Fatalf("no master pid in the log:\n%s", d.logs())
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	return pid
}
