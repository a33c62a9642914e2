//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestWebUIAgents: the agents page of the real daemon in a real browser
// lists the master running, a task sent from its form shows its result,
// and the table's last result follows by itself (polling); at a phone's
// width the page still works.
func TestWebUIAgents(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, ""))
	base := d.url()

	b := newBrowser(t, 1100, 800)
	b.run("open the agents page", 20*time.Second, chromedp.Navigate(base+"/"))
	b.waitText("master listed", "#agents-table", "master", 15*time.Second)
	b.waitText("master running", "#agents-table", "running", 15*time.Second)

	b.run("send a task", 10*time.Second,
		chromedp.SetValue("#task-input", "hello from the browser", chromedp.ByQuery),
		chromedp.Click("#task-send", chromedp.ByQuery))
	b.waitText("task done", "#task-outcome", "done", 20*time.Second)
	out := b.waitText("task output", "#task-output", "hello from the browser", 5*time.Second)
	if strings.TrimSpace(out) != "hello from the browser" {
		t.Errorf("output shown %q", out)
	}
	var id string
	b.run("task id", 5*time.Second, chromedp.Text("#task-outcome code", &id, chromedp.ByQuery))
	if !strings.HasPrefix(id, "ui-") {
		t.Fatalf("task id shown %q", id)
	}
	// The table shows the task as the master's last result without a reload.
	b.waitText("last result live", "#agents-table", id, 10*time.Second)
	b.shot("agents")

	// A JSON input that does not parse is refused in the page, nothing sent.
	b.run("bad JSON", 10*time.Second,
		chromedp.SetValue("#task-input", "{not json", chromedp.ByQuery),
		chromedp.Click("#task-json", chromedp.ByQuery),
		chromedp.Click("#task-send", chromedp.ByQuery))
	b.waitText("bad JSON message", "#task-result", "not valid JSON", 5*time.Second)

	// The API's refusal is shown as it says it: an unknown agent.
	b.run("unknown agent", 10*time.Second,
		chromedp.Evaluate(`(() => { const s = document.querySelector('#task-agent');
			s.append(new Option('ghost', 'ghost')); s.value = 'ghost'; })()`, nil),
		chromedp.SetValue("#task-input", "x", chromedp.ByQuery),
		chromedp.Click("#task-json", chromedp.ByQuery), // back to plain text
		chromedp.Click("#task-send", chromedp.ByQuery))
	b.waitText("refusal shown", "#task-result", "no agent ghost in this daemon (unknown_agent, HTTP 404)", 5*time.Second)

	// A phone's width: the table becomes cards, nothing overflows sideways.
	phone := newBrowser(t, 390, 844)
	phone.run("open at phone width", 20*time.Second, chromedp.Navigate(base+"/#/agents"))
	phone.waitText("phone: master", "#agents-table", "running", 15*time.Second)
	var overflow bool
	phone.run("no sideways scroll", 5*time.Second,
		chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
	if overflow {
		phone.shot("failed-phone-overflow")
		t.Error("the agents page scrolls sideways at 390 px")
	}
	phone.shot("agents-phone")
}

// inNetns runs the calling test again, alone, in a new user and network
// namespace (as root there, with only its own loopback), and reports
// whether this is that second run. The first run returns false after the
// second has finished, having failed if it failed.
func inNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("OPENSTARRY_IN_NETNS") == "1" {
		return true
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("no unshare (util-linux) on PATH")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("no ip (iproute2) on PATH: apt-get install iproute2 (.ci/run installs it)")
	}
	if out, err := exec.Command(unshare, "--user", "--map-root-user", "--net", "true").CombinedOutput(); err != nil {
		t.Skipf("no user and network namespaces here (%v: %s): the kernel or its settings forbid them", err, bytes.TrimSpace(out))
	}
	cmd := exec.Command(unshare, "--user", "--map-root-user", "--net", os.Args[0],
		"-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), "OPENSTARRY_IN_NETNS=1", "OPENSTARRY_TEST_BIN="+binPath)
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the run in a network namespace failed: %v", err)
	}
	return false
}

// offLoopback gives the namespace's loopback interface an address that is
// not a loopback address (10.77.0.1), so that a browser in the namespace
// reaches the daemon from off loopback, as one on the device's LAN does.
func offLoopback(t *testing.T) string {
	t.Helper()
	const addr = "10.77.0.1"
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", addr + "/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return addr
}

// evalAsync evaluates a script that returns a promise and stores its value.
func evalAsync(js string, res any) chromedp.Action {
	return chromedp.Evaluate(js, res, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	})
}

// TestWebUILogin: with the listener off loopback (an address of a network
// namespace of the test's own), the page asks for the token, refuses a
// wrong one with the API's reason, and after the right one works through
// an HttpOnly SameSite=Strict cookie; a write without the CSRF token is
// refused; logging out ends it.
func TestWebUILogin(t *testing.T) {
	if !inNetns(t) {
		return
	}
	addr := offLoopback(t)
	data := dataDir(t)
	const tok = "lan-token-0123456789"
	cfg := filepath.Join(t.TempDir(), "openstarry.yaml")
	body := fmt.Sprintf("data: %s\nhttp:\n  listen: %s:0\n  token: %s\nmqtt:\n  disabled: true\n"+
		"supervise:\n  backoff_initial: 50ms\n  stop_timeout: 5s\n  ready_timeout: 20s\n", data, addr, tok)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	base := d.url()
	if !strings.Contains(base, addr) {
		t.Fatalf("listening on %s, want %s", base, addr)
	}

	b := newBrowser(t, 1100, 700)
	b.run("open", 20*time.Second, chromedp.Navigate(base+"/"))
	b.waitText("login form", "#login-form", "Token", 10*time.Second)
	var status int
	b.run("API without login", 5*time.Second, evalAsync(`fetch('/status').then(r => r.status)`, &status))
	if status != 401 {
		t.Fatalf("GET /status before login: %d, want 401", status)
	}
	b.run("wrong token", 10*time.Second,
		chromedp.SetValue("#login-token", "not-the-token", chromedp.ByQuery),
		chromedp.SetValue("#login-name", "alice", chromedp.ByQuery),
		chromedp.Click("#login-form button[type=submit]", chromedp.ByQuery))
	b.waitText("wrong token refused", "#login-msg", "wrong token", 5*time.Second)
	b.shot("login")

	b.run("right token", 10*time.Second,
		chromedp.SetValue("#login-token", tok, chromedp.ByQuery),
		chromedp.Click("#login-form button[type=submit]", chromedp.ByQuery))
	b.waitText("signed in", "#who", "Signed in as alice", 10*time.Second)
	b.waitText("agents after login", "#agents-table", "running", 15*time.Second)

	var cookies []*network.Cookie
	b.run("cookies", 5*time.Second, chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().Do(ctx)
		return err
	}))
	var sess *network.Cookie
	for _, c := range cookies {
		if c.Name == "openstarry_session" {
			sess = c
		}
		if strings.Contains(c.Value, tok) {
			t.Errorf("the token is in cookie %s", c.Name)
		}
	}
	if sess == nil || !sess.HTTPOnly || sess.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict", sess)
	}
	var js string
	b.run("page cannot read the cookie", 5*time.Second, chromedp.Evaluate(`document.cookie`, &js))
	if strings.Contains(js, "openstarry_session") {
		t.Error("document.cookie shows the session")
	}

	// The cookie alone does not let a script write: it needs the CSRF token.
	var refused struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	b.run("write without CSRF", 10*time.Second, evalAsync(`fetch('/agents/master/tasks', {method: 'POST',
		headers: {'Content-Type': 'application/json'}, body: JSON.stringify({task_id: 'no-csrf', input: 'x'})})
		.then(async r => ({status: r.status, code: (await r.json()).code}))`, &refused))
	if refused.Status != 403 || refused.Code != "csrf" {
		t.Errorf("POST without the CSRF token: %+v, want 403 csrf", refused)
	}

	b.run("send a task", 10*time.Second,
		chromedp.SetValue("#task-input", "sent from the LAN", chromedp.ByQuery),
		chromedp.Click("#task-send", chromedp.ByQuery))
	b.waitText("task done", "#task-outcome", "done", 20*time.Second)
	b.waitText("task output", "#task-output", "sent from the LAN", 5*time.Second)
	if !strings.Contains(d.logs(), `web UI: login`) || !strings.Contains(d.logs(), `login with a wrong token`) {
		t.Error("the daemon did not log the logins")
	}
	if strings.Contains(d.logs(), tok) {
		t.Error("the token is in the daemon's log")
	}

	b.run("log out", 10*time.Second, chromedp.Click("#logout", chromedp.ByQuery))
	b.waitText("login again", "#login-form", "Token", 10*time.Second)
	b.run("API after logout", 5*time.Second, evalAsync(`fetch('/status').then(r => r.status)`, &status))
	if status != 401 {
		t.Errorf("GET /status after logout: %d, want 401", status)
	}
}
