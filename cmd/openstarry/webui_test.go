//go:build unix

package main

import (
	"strings"
	"testing"
	"time"

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
