//go:build unix

package main

// Tests of issue #28's protections that need the real daemon and its
// agents (see docs/security.md, "Protections and their settings").

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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
	// The agent's own port with its own Host passes the Host check and
	// then needs the daemon's token (TestAgentPortNeedsDaemonToken).
	if code, body := hostRequest(t, "POST", master.Addr+"/agents/master/tasks", au.Host, task("ok-direct")); code != http.StatusUnauthorized {
		t.Errorf("POST to the agent with Host %s: %d %s", au.Host, code, body)
	}
}

// TestAgentPortNeedsDaemonToken: a local process that is not the daemon
// (another user's, in the issue) reaches an agent's own port on loopback
// and is refused 401 without the daemon's per-boot token, for tasks and
// the snapshot alike; the token is not on the agent's command line; the
// daemon itself still reaches the agent (proxied tasks, status).
func TestAgentPortNeedsDaemonToken(t *testing.T) {
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, ""))
	base := c.url()
	master := waitAgent(t, data, "master", 30*time.Second, func(a control.AgentInfo) bool { return a.State == "running" && a.Addr != "" })
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/agents/master/tasks", `{"task_id":"direct-1","input":{"call":[{"tool":"file_append","args":{"file":"x.txt","line":"owned"}}]}}`},
		{"GET", "/agents/master/snapshot", ""},
		{"GET", "/agents/master/tasks/direct-1", ""},
		{"GET", "/healthz", ""},
	} {
		u, _ := url.Parse(master.Addr)
		code, body := hostRequest(t, r.method, master.Addr+r.path, u.Host, r.body)
		if code != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("%s %s on the agent's port without the token: %d %s", r.method, r.path, code, body)
		}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", master.PID))
	if err == nil && strings.Contains(string(cmdline), "TOKEN") {
		t.Errorf("a token on the agent's command line: %q", cmdline)
	}
	if code, resp, err := postTask(t.Context(), base, "master", []byte(`{"task_id":"proxied-1","input":"x"}`)); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task through the daemon: %d %s %v", code, resp, err)
	}
	waitTask(t, base, "master", "proxied-1")
	if _, err := os.Stat(filepath.Join(data, "agents", "master", "artifacts", "x.txt")); err == nil {
		t.Error("the refused task wrote its file")
	}
	a := waitAgent(t, data, "master", 30*time.Second, func(a control.AgentInfo) bool { return a.Snapshot })
	if a.Tick == 0 {
		t.Errorf("the daemon's status has no snapshot of the agent: %+v", a)
	}
}

// TestWebhookReplay: a captured signed delivery sent again, with a new
// delivery id or none, is refused 409 replayed and does not run again,
// also after the agent is SIGKILLed and started again on its data; the
// source's own redelivery (same id) is still 200. A signed timestamp is
// checked: the signature must cover it and it must be recent.
func TestWebhookReplay(t *testing.T) {
	data := t.TempDir()
	tmpl := hookedTemplate(t)
	start := func() (*child, string, string) {
		c := startChild(t, true, "run", "--agent", "hook", "--template", tmpl, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
		base := c.url()
		m := webhookRe.FindStringSubmatch(c.logs())
		if m == nil {
			t.Fatalf("no webhook listener line in the log:\n%s", c.logs())
		}
		return c, base, m[1]
	}
	c, base, hook := start()
	deliver := func(body, sig, delivery, ts string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", hook, strings.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", sig)
		if delivery != "" {
			req.Header.Set("X-GitHub-Delivery", delivery)
		}
		if ts != "" {
			req.Header.Set("X-Signature-Timestamp", ts)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sign := func(msg string) string {
		mac := hmac.New(sha256.New, []byte("s3cret"))
		mac.Write([]byte(msg))
		return "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	body := `{"ref":"refs/heads/main","after":"abc123"}`
	if code, out := deliver(body, sign(body), "d-1", ""); code != 202 {
		t.Fatalf("first delivery: %d %s", code, out)
	}
	if code, out := deliver(body, sign(body), "d-1", ""); code != 200 {
		t.Fatalf("the source's redelivery: %d %s", code, out)
	}
	for _, id := range []string{"d-2", "d-3", ""} {
		if code, out := deliver(body, sign(body), id, ""); code != 409 || !strings.Contains(out, `"code":"replayed"`) || !strings.Contains(out, "forge-d-1") {
			t.Fatalf("replay with delivery id %q: %d %s", id, code, out)
		}
	}
	c.waitLog("a signature already taken within the replay window", 5*time.Second)
	waitTask(t, base, "hook", "forge-d-1")
	c.kill()
	c, base, hook = start()
	if code, out := deliver(body, sign(body), "d-4", ""); code != 409 {
		t.Fatalf("replay after a restart: %d %s", code, out)
	}
	for _, id := range []string{"forge-d-2", "forge-d-3", "forge-d-4"} {
		if code, _, _ := getTask(base, "hook", id); code != 404 {
			t.Fatalf("the replay %s was queued (%d)", id, code)
		}
	}

	// Signed timestamps.
	now := strconv.FormatInt(time.Now().Unix(), 10)
	body2 := `{"ref":"refs/heads/next"}`
	if code, out := deliver(body2, sign(now+"."+body2), "t-1", now); code != 202 {
		t.Fatalf("a signed timestamp: %d %s", code, out)
	}
	if code, out := deliver(body2, sign(now+"."+body2), "t-2", now); code != 409 {
		t.Fatalf("a replayed signed timestamp: %d %s", code, out)
	}
	if code, out := deliver(body2, sign(body2), "t-3", now); code != 401 || !strings.Contains(out, "bad_signature") {
		t.Fatalf("a timestamp the signature does not cover: %d %s", code, out)
	}
	old := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	if code, out := deliver(body2, sign(old+"."+body2), "t-4", old); code != 401 || !strings.Contains(out, "stale_timestamp") {
		t.Fatalf("a stale timestamp: %d %s", code, out)
	}
	if fi, err := os.Stat(filepath.Join(data, "agents", "hook", "listeners", "webhook-forge.seen")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the replay record: %v %v", fi, err)
	}
}

// TestShortTokenRefused: a bearer token shorter than the documented
// minimum is refused at start, by the daemon and by run.
func TestShortTokenRefused(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "")
	raw, _ := os.ReadFile(cfg)
	withToken := strings.Replace(string(raw), "  listen: 127.0.0.1:0\n", "  listen: 127.0.0.1:0\n  token: a\n", 1)
	if err := os.WriteFile(cfg, []byte(withToken), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "start", "--config", cfg)
	if code == 0 || !strings.Contains(out, "http.token: is too short: at least 16 characters are required, it has 1") {
		t.Fatalf("start with http.token a: %d\n%s", code, out)
	}
	out, code = runCLI(t, "run", "--agent", "a1", "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt", "--token", "short")
	if code == 0 || !strings.Contains(out, "--token is too short: at least 16 characters are required, it has 5") {
		t.Fatalf("run --token short: %d\n%s", code, out)
	}
}

// TestBrokerListenOffLoopback: an embedded broker on a specific
// non-loopback address, which refuses the agent's own anonymous client, is
// refused at start with what to do instead, by run and by the daemon.
func TestBrokerListenOffLoopback(t *testing.T) {
	data := dataDir(t)
	out, code := runCLI(t, "run", "--agent", "a1", "--data", data, "--listen", "127.0.0.1:0", "--broker-listen", "192.0.2.200:18831")
	if code == 0 || !strings.Contains(out, "Listen on 0.0.0.0:18831") {
		t.Fatalf("run --broker-listen off loopback: %d\n%s", code, out)
	}
	cfg := daemonConfig(t, data, "mqtt:\n  broker_listen: 192.0.2.200:18831\n")
	out, code = runCLI(t, "start", "--config", cfg)
	if code == 0 || !strings.Contains(out, "mqtt.broker_listen: 192.0.2.200:18831 is not a loopback address") {
		t.Fatalf("start with mqtt.broker_listen off loopback: %d\n%s", code, out)
	}
}
