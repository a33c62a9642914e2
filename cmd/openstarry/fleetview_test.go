//go:build unix

package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestFleetStatusRunningTask: a device's retained telemetry carries the
// task each agent has in hand, and `openstarry fleet status` shows it: the
// device, the agent, the task, its step and tool, how long it has run.
func TestFleetStatusRunningTask(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, "mqtt:\n  broker: "+m.URL()+"\n  device: dev-busy\n  telemetry_interval: 1s\n"))
	d.waitLog("mqtt: connected to "+m.URL(), 10*time.Second)
	task := map[string]any{"task_id": "long-fleet", "input": map[string]any{"call": []any{
		map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 8000}}}}}
	if code, body := api(t, "POST", d.url()+"/agents/master/tasks", task); code != 202 {
		t.Fatalf("POST: %d %s", code, body)
	}
	row := regexp.MustCompile(`(?m)^DEVICE\s+AGENT\s+TASK\s+STEP\s+DOING\s+ELAPSED\ndev-busy\s+master\s+long-fleet\s+1\s+tool sleep_ms\s+\S+$`)
	var out string
	wait.For(t, 20*time.Second, "fleet status showing the running task", func() bool {
		var code int
		out, code = runCLI(t, "fleet", "status", "--broker", m.URL(), "--wait", "500ms")
		return code == 0 && row.MatchString(out)
	})
	t.Logf("fleet status:\n%s", out)
	out, code := runCLI(t, "fleet", "status", "--broker", m.URL(), "--wait", "500ms", "--json")
	if code != 0 || !regexp.MustCompile(`"current_task":\{"task_id":"long-fleet","step":0,"phase":"tool:sleep_ms","tool":"sleep_ms"`).MatchString(out) {
		t.Fatalf("fleet status --json: %d\n%s", code, out)
	}
}

// TestPrintFleetDegraded: fleet status names the agents a device booted on
// a cached template, with the reason its telemetry carries.
func TestPrintFleetDegraded(t *testing.T) {
	now := time.Date(2026, 11, 23, 9, 40, 0, 0, time.UTC)
	views := []fleet.DeviceView{{Device: "pi-kitchen", State: "online", Telemetry: &fleet.Telemetry{
		Device: "pi-kitchen", Version: "1.4.0", Time: now, Agents: []fleet.AgentTelemetry{
			{ID: "master", Role: "master", State: "running", Template: "master", TemplateVersion: "1.0.0", TemplateSource: "cache",
				Degraded: true, DegradedReason: "design layer unreachable: booting cached template master 1.0.0 fetched 2h ago: connection refused"},
			{ID: "w1", Role: "worker", State: "running", Template: "worker", TemplateVersion: "1.0.0", TemplateSource: "remote"}}}}}
	var b strings.Builder
	printFleet(&b, views, now)
	want := "degraded: pi-kitchen master runs template master 1.0.0 from the cache: design layer unreachable: booting cached template master 1.0.0 fetched 2h ago: connection refused\n"
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "w1 runs") {
		t.Fatalf("fleet status:\n%s", b.String())
	}
}
