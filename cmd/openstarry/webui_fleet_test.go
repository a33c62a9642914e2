//go:build unix

package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestWebUIFleet: two daemons on one Mosquitto hub; the web UI of the
// first, in a real browser, shows the Fleet page: both devices from their
// retained status and telemetry with their agents and version, the task the
// second one runs, and its degraded boot (its master's template from the
// cache, the design layer gone). A task sent from the page's form is
// published on the fleet topic and one device runs it. At a phone's width
// the page still works.
func TestWebUIFleet(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	hub := func(dev string) string {
		return "mqtt:\n  broker: " + m.URL() + "\n  device: " + dev + "\n  telemetry_interval: 1s\n"
	}
	dataA := dataDir(t)
	a := startDaemon(t, daemonConfig(t, dataA, hub("dev-a")))
	a.waitLog("mqtt: connected to "+m.URL(), 10*time.Second)

	// dev-b boots once from a design layer, then again with it gone: from
	// the cache, degraded.
	tdir := t.TempDir()
	copyShipped(t, tdir, "master.json", "worker.json", "echo.json")
	set, err := templateValidator().LoadDir(tdir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(design.NewServer(set, zerolog.Nop()))
	dataB := dataDir(t)
	cfgB := daemonConfig(t, dataB, hub("dev-b")+fmt.Sprintf("design:\n  url: %s\n  timeout: 1s\n  retries: 0\n", srv.URL))
	b := startDaemon(t, cfgB)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := b.wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("stop dev-b: %d %v", code, err)
	}
	srv.Close()
	b = startDaemon(t, cfgB)
	b.waitLog("mqtt: connected to "+m.URL(), 10*time.Second)
	if code, body := api(t, "POST", b.url()+"/agents/master/tasks", map[string]any{"task_id": "long-b", "input": map[string]any{
		"call": []any{map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 8000}}}}}); code != 202 {
		t.Fatalf("POST the long task: %d %s", code, body)
	}

	br := newBrowser(t, 1100, 800)
	br.run("open the fleet page", 20*time.Second, chromedp.Navigate(a.url()+"/#/fleet"))
	br.waitText("both devices", "#fleet-table", "dev-b", 20*time.Second)
	table := br.waitText("dev-a listed", "#fleet-table", "dev-a", 10*time.Second)
	if !strings.Contains(table, "online") || !strings.Contains(table, "1/1 running: master") {
		t.Errorf("fleet table %q", table)
	}
	running := br.waitText("dev-b's running task", "#fleet-table .current-task", "long-b", 20*time.Second)
	if !strings.Contains(running, "tool sleep_ms") {
		t.Errorf("running task shown as %q", running)
	}
	degraded := br.waitText("dev-b's degraded boot", "#fleet-table .degraded", "from the cache", 10*time.Second)
	if !strings.Contains(degraded, "master") || !strings.Contains(degraded, "design layer unreachable") {
		t.Errorf("degraded boot shown as %q", degraded)
	}
	br.shot("fleet")
	br.checkA11y("fleet")

	// A task for the fleet, from the page.
	br.run("send a fleet task", 10*time.Second,
		chromedp.SetValue("#fleet-input", "hello, fleet", chromedp.ByQuery),
		chromedp.Click("#fleet-send", chromedp.ByQuery))
	br.waitText("published", "#fleet-outcome", "published on openstarry/fleet/tasks", 15*time.Second)
	var id string
	br.run("task id", 5*time.Second, chromedp.Text("#fleet-outcome code", &id, chromedp.ByQuery))
	if !strings.HasPrefix(id, "ui-") {
		t.Fatalf("task id shown %q", id)
	}
	wait.For(t, 30*time.Second, "one device ran the fleet task", func() bool {
		for _, base := range []string{a.url(), b.url()} {
			code, body := api(t, "GET", base+"/agents/master/tasks/"+id, nil)
			if code == 200 && strings.Contains(string(body), `"status":"done"`) && strings.Contains(string(body), "hello, fleet") {
				return true
			}
		}
		return false
	})

	// dev-b's own Agents page says the same of its master.
	br.run("dev-b's agents page", 20*time.Second, chromedp.Navigate(b.url()+"/#/agents"))
	agentsB := br.waitText("dev-b's master degraded", "#agents-table .degraded", "booting cached template master 1.0.0", 15*time.Second)
	if !strings.Contains(agentsB, "design layer unreachable") {
		t.Errorf("dev-b's agents page: %q", agentsB)
	}
	br.waitText("dev-b's master template", "#agents-table", "master 1.0.0 (cache)", 5*time.Second)

	// A phone's width.
	br.resize(390, 844)
	br.run("fleet at phone width", 20*time.Second, chromedp.Navigate(a.url()+"/#/fleet"), chromedp.Reload())
	br.waitText("phone: devices", "#fleet-table", "dev-b", 20*time.Second)
	br.checkNarrow("fleet")
	br.shot("fleet-phone")
}
