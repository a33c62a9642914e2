package main

// Tests of issue #28's protections that need the real daemon and its
// agents (see docs/security.md, "Protections and their settings").

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// hostRequest sends method url with the Host header host and returns the
// status and the body.
func hostRequest(t *testing.T, method, rawURL, host, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Header.Set("Origin", "http://"+host)
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, rawURL, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDNSRebindingRefused: a page on a name its attacker points at
// 127.0.0.1 reaches the daemon's listener and the agent's own port with
// that name as Host, and same-origin headers; every such request is
// refused 403 bad_host before it does anything, while loopback names and
// addresses and the names in http.hosts are served.
func TestDNSRebindingRefused(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "")
	raw, _ := os.ReadFile(cfg)
	withHosts := strings.Replace(string(raw), "  listen: 127.0.0.1:0\n", "  listen: 127.0.0.1:0\n  hosts: [openstarry.lan, \"*.fleet.example\"]\n", 1)
	if err := os.WriteFile(cfg, []byte(withHosts), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startDaemon(t, cfg)
	base := c.url()
	u, _ := url.Parse(base)
	port := u.Port()
	master := waitAgent(t, data, "master", 30*time.Second, func(a control.AgentInfo) bool { return a.State == "running" && a.Addr != "" })
	au, _ := url.Parse(master.Addr)

	task := func(id string) string {
		b, _ := json.Marshal(map[string]string{"task_id": id, "input": "x"})
		return string(b)
	}
	for i, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "127.0.0.1.nip.io:" + port,
		"openstarry.lan.attacker.example:" + port, "fleet.example:" + port} {
		for _, target := range []string{base + "/agents/master/tasks", master.Addr + "/agents/master/tasks"} {
			code, body := hostRequest(t, "POST", target, host, task("rebind-"+string(rune('a'+i))))
			if code != http.StatusForbidden || !strings.Contains(body, `"code":"bad_host"`) {
				t.Errorf("POST %s with Host %s: %d %s", target, host, code, body)
			}
		}
		if code, body := hostRequest(t, "GET", base+"/status", host, ""); code != http.StatusForbidden {
			t.Errorf("GET /status with Host %s: %d %s", host, code, body)
		}
	}
	for i, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port, "openstarry.lan:" + port, "pi.fleet.example:" + port} {
		code, body := hostRequest(t, "POST", base+"/agents/master/tasks", host, task("ok-"+string(rune('a'+i))))
		if code != http.StatusAccepted {
			t.Errorf("POST with Host %s: %d %s", host, code, body)
		}
	}
	if code, body := hostRequest(t, "POST", master.Addr+"/agents/master/tasks", au.Host, task("ok-direct")); code != http.StatusAccepted {
		t.Errorf("POST to the agent with Host %s: %d %s", au.Host, code, body)
	}
}
