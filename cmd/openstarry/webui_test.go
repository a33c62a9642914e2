//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/openstarry/openstarry-edge/internal/wait"
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
	b.waitText("master's template and source", "#agents-table", "template master 1.0.0 (embedded)", 5*time.Second)

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
	// A long task: the table shows it in hand (its id and tool) while it
	// runs, by itself.
	if code, body := api(t, "POST", base+"/agents/master/tasks", map[string]any{"task_id": "long-ui", "input": map[string]any{
		"call": []any{map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": 6000}}}}}); code != 202 {
		t.Fatalf("POST the long task: %d %s", code, body)
	}
	running := b.waitText("running task shown", "#agents-table .current-task", "tool sleep_ms", 15*time.Second)
	if !strings.Contains(running, "long-ui") || !strings.Contains(running, "step 1") || !strings.Contains(running, "last progress") {
		t.Errorf("running task shown as %q", running)
	}
	b.shot("agents")
	b.checkA11y("agents")

	// The keyboard alone: type, tab to Send, press Enter.
	b.run("keyboard send", 10*time.Second,
		chromedp.Evaluate(`document.querySelector('#task-input').value = ''`, nil),
		chromedp.Focus("#task-input", chromedp.ByQuery),
		chromedp.KeyEvent("typed on the keyboard"),
		chromedp.KeyEvent(kb.Tab), // the JSON box
		chromedp.KeyEvent(kb.Tab), // Send
		chromedp.KeyEvent(kb.Enter))
	b.waitText("keyboard task output", "#task-output", "typed on the keyboard", 20*time.Second)

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
	phone := b
	phone.resize(390, 844)
	phone.run("open at phone width", 20*time.Second, chromedp.Navigate(base+"/#/agents"), chromedp.Reload())
	phone.waitText("phone: master", "#agents-table", "running", 15*time.Second)
	phone.checkNarrow("agents")
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
	b.checkA11y("login")

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

// callJSON calls the daemon's HTTP API and decodes the answer into out (when
// not nil); it fails the test on a status other than want.
func callJSON(t *testing.T, method, url string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, data)
		}
	}
}

// uiProject is what the test reads of a project view.
type uiProject struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Tasks     []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		State  string `json:"state"`
	} `json:"tasks"`
	Sessions []struct {
		ID     string `json:"id"`
		Parent string `json:"parent_session_id"`
		Status string `json:"status"`
		Reason string `json:"interruption_reason"`
	} `json:"sessions"`
}

// waitProject polls a project until cond holds.
func waitProject(t *testing.T, base, id string, what string, cond func(uiProject) bool, logs func() string) uiProject {
	t.Helper()
	var p uiProject
	if err := wait.Poll(30*time.Second, func() error {
		p = uiProject{}
		callJSON(t, "GET", base+"/projects/"+id, nil, 200, &p)
		if !cond(p) {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("project %s: %s: not within 30 s; last %+v\n%s", id, what, p, logs())
	}
	return p
}

func planStatus(p uiProject, i int) string {
	if i >= len(p.Tasks) {
		return ""
	}
	return p.Tasks[i].Status
}

// TestWebUISessions: through the pages of a real daemon in a real browser,
// a project interrupted by a SIGKILL of the daemon shows an enabled Resume
// button (and a running one a disabled button); clicking it creates a child
// session that appears in the history and finishes the remaining tasks;
// approving a pending approval releases the task waiting for it, and the
// history shows the decision.
func TestWebUISessions(t *testing.T) {
	data := dataDir(t)
	cfg := daemonConfig(t, data, "")
	d := startDaemon(t, cfg)
	base := d.url()

	// A plan whose second task is under way when the daemon is killed.
	var interrupted uiProject
	callJSON(t, "POST", base+"/projects", map[string]any{
		"name": "Nightly build", "description": "compile, test for a while, then package",
		"tasks": []map[string]any{
			{"phase": 1, "type": "compile", "name": "compile", "input": "compiled"},
			{"phase": 1, "type": "test", "name": "long test run", "depends_on": []int{0},
				"input": map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": 2500}}}}},
			{"phase": 2, "type": "package", "name": "package", "input": "packaged", "depends_on": []int{1}},
		}}, 201, &interrupted)
	waitProject(t, base, interrupted.ID, "second task under way", func(p uiProject) bool {
		return planStatus(p, 0) == "completed" && planStatus(p, 1) == "in_progress"
	}, d.logs)
	master, _ := agentInfo(daemonStatus(t, data), "master")
	d.kill()
	// The master dies with the daemon (Pdeathsig), but not at once: the
	// next daemon's master would find its store still locked.
	wait.For(t, 10*time.Second, "the killed daemon's master gone", func() bool { return pidGone(master.PID) })
	d = startDaemon(t, cfg)
	base = d.url()
	p := waitProject(t, base, interrupted.ID, "interrupted", func(p uiProject) bool { return p.Status == "interrupted" }, d.logs)
	oldSession := p.SessionID

	// A plan with an approval gate before its last task.
	var gated uiProject
	callJSON(t, "POST", base+"/projects", map[string]any{
		"name": "Release notes", "description": "draft, reviewed by a person, then published",
		"tasks": []map[string]any{
			{"phase": 1, "type": "draft", "name": "draft the notes", "approval": true, "input": map[string]any{"call": []map[string]any{
				{"tool": "file_append", "args": map[string]string{"file": "notes.md", "line": "Release notes v1: faster boot."}}}}},
			{"phase": 1, "type": "publish", "name": "publish", "input": "published", "depends_on": []int{0}},
		}}, 201, &gated)
	waitProject(t, base, gated.ID, "waiting for approval", func(p uiProject) bool {
		return len(p.Tasks) > 0 && p.Tasks[0].State == "WAITING_FOR_APPROVAL"
	}, d.logs)
	var pending []struct {
		ID     int64  `json:"id"`
		TaskID string `json:"task_id"`
	}
	callJSON(t, "GET", base+"/projects/"+gated.ID+"/approvals?status=pending", nil, 200, &pending)
	if len(pending) != 1 {
		t.Fatalf("pending approvals %+v, want 1", pending)
	}

	b := newBrowser(t, 1100, 800)
	b.run("projects page", 20*time.Second, chromedp.Navigate(base+"/#/projects"))
	b.waitText("both projects", "#projects-list", "Release notes", 15*time.Second)
	b.waitText("interrupted shown", `[data-project="`+interrupted.ID+`"]`, "interrupted", 10*time.Second)
	var resumeDisabled, otherDisabled bool
	b.run("resume buttons", 5*time.Second,
		chromedp.Evaluate(`document.getElementById('resume-`+interrupted.ID+`').disabled`, &resumeDisabled),
		chromedp.Evaluate(`document.getElementById('resume-`+gated.ID+`').disabled`, &otherDisabled))
	if resumeDisabled || !otherDisabled {
		t.Fatalf("Resume disabled: interrupted project %v (want false), active project %v (want true)", resumeDisabled, otherDisabled)
	}
	b.shot("projects")
	b.checkA11y("projects")

	// Keyboard only: focus the button and press Enter.
	b.run("resume with the keyboard", 10*time.Second,
		chromedp.Focus("#resume-"+interrupted.ID, chromedp.ByID),
		chromedp.KeyEvent("\r"))
	msg := b.waitText("resumed", "#projects-msg", "Resumed Nightly build: new session sess_", 10*time.Second)
	if !strings.Contains(msg, "child of "+oldSession) {
		t.Errorf("resume message %q does not name the parent %s", msg, oldSession)
	}
	p = waitProject(t, base, interrupted.ID, "resumed and finished", func(p uiProject) bool {
		return len(p.Sessions) == 2 && planStatus(p, 2) == "completed"
	}, d.logs)
	child := p.Sessions[1]
	if child.Parent != oldSession || p.Sessions[0].Status != "resumed" {
		t.Fatalf("sessions %+v: want the second a child of %s", p.Sessions, oldSession)
	}

	// The history shows the chain: the interrupted session and its child.
	b.run("project page", 10*time.Second, chromedp.Navigate(base+"/#/projects/"+interrupted.ID))
	hist := b.waitText("child in history", "#sessions", child.ID, 10*time.Second)
	for _, want := range []string{oldSession, "Resumed from", "crash", "Context summary"} {
		if !strings.Contains(hist, want) {
			t.Errorf("session history lacks %q:\n%s", want, hist)
		}
	}
	b.waitText("tasks done", "#main table", "completed", 10*time.Second)
	b.shot("project")
	b.checkA11y("project")

	// Approvals: approve the pending one with a feedback.
	b.run("approvals page", 10*time.Second, chromedp.Navigate(base+"/#/approvals"))
	card := fmt.Sprintf(`[data-approval="%d"]`, pending[0].ID)
	b.waitText("pending card", "#pending", pending[0].TaskID, 10*time.Second)
	// The reviewer sees the result under review and opens what the task
	// wrote (issue 29).
	cardText := b.waitText("result on the card", card, "Result", 10*time.Second)
	if !strings.Contains(cardText, "notes.md") || !strings.Contains(cardText, "file_append") {
		t.Errorf("the pending card lacks the result or the artifact:\n%s", cardText)
	}
	b.run("show the artifact", 10*time.Second, chromedp.Click(card+` .artifacts button`, chromedp.ByQuery))
	b.waitText("artifact shown", card+" pre.preview", "Release notes v1: faster boot.", 10*time.Second)
	b.shot("approvals-pending")
	b.checkA11y("approvals")
	b.run("approve", 10*time.Second,
		chromedp.SendKeys("#decider", "Dana", chromedp.ByID),
		chromedp.SendKeys(card+" textarea", "Clear and short: publish it.", chromedp.ByQuery),
		chromedp.Click(card+` button[data-decision="approve"]`, chromedp.ByQuery))
	b.waitText("approved message", "#approvals-msg", "approved", 10*time.Second)
	h := b.waitText("history shows it", "#history", "approved", 10*time.Second)
	if !strings.Contains(h, "Clear and short: publish it.") || !strings.Contains(h, pending[0].TaskID) || !strings.Contains(h, "Dana") {
		t.Errorf("history lacks the decision:\n%s", h)
	}
	b.waitText("nothing pending", "#pending", "Nothing waits for a decision", 10*time.Second)
	// The waiting task is released: the gated task completes, then its dependent.
	waitProject(t, base, gated.ID, "released", func(p uiProject) bool {
		return planStatus(p, 0) == "completed" && planStatus(p, 1) == "completed"
	}, d.logs)
	b.shot("approvals")

	// At a phone's width every page fits.
	phone := b
	phone.resize(390, 844)
	for _, pg := range []struct{ name, hash, sel, want string }{
		{"projects", "#/projects", "#projects-list", "Nightly build"},
		{"project", "#/projects/" + interrupted.ID, "#sessions", child.ID},
		{"approvals", "#/approvals", "#history", "Dana"},
	} {
		phone.run("phone "+pg.name, 20*time.Second, chromedp.Navigate(base+"/"+pg.hash))
		phone.waitText("phone "+pg.name, pg.sel, pg.want, 15*time.Second)
		phone.checkNarrow(pg.name)
	}
	phone.shot("approvals-phone")

	// A revision without feedback is refused in the page; the API's own
	// refusal is shown as it says it.
	var again uiProject
	callJSON(t, "POST", base+"/projects", map[string]any{"name": "Logo", "tasks": []map[string]any{
		{"phase": 1, "type": "draw", "input": "logo v1", "approval": true}}}, 201, &again)
	b.run("approvals again", 10*time.Second, chromedp.Navigate(base+"/#/projects"), chromedp.Navigate(base+"/#/approvals"))
	b.waitText("new pending", "#pending", "task_p1_draw_001", 15*time.Second)
	b.run("revise without feedback", 10*time.Second, chromedp.Click(`#pending button[data-decision="revise"]`, chromedp.ByQuery))
	b.waitText("feedback needed", "#pending .msg", "needs feedback", 5*time.Second)
	var id int64
	b.run("approval id", 5*time.Second, chromedp.Evaluate(`+document.querySelector('#pending [data-approval]').dataset.approval`, &id))
	// Decided meanwhile on the device's terminal: the page says so when
	// asked to decide again, and the history says who rejected it.
	if out, code := runCLI(t, "approval", "reject", fmt.Sprint(id), "--config", cfg, "--by", "erin@console", "--feedback", "off brand"); code != 0 {
		t.Fatalf("approval reject: %d %s", code, out)
	}
	b.run("approve a decided one", 10*time.Second, chromedp.Click(`#pending button[data-decision="approve"]`, chromedp.ByQuery))
	b.waitText("conflict shown", "#pending .msg", "HTTP 409", 5*time.Second)
	b.waitText("CLI decision in history", "#history", "erin@console", 10*time.Second)
}
