//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// browser is a headless Chromium driven over the DevTools protocol.
type browser struct {
	t   testing.TB
	ctx context.Context
	dir string // where screenshots go
}

// chromiumPath finds Debian's chromium (or another Chromium build); the
// test fails when there is none: CI installs it (.ci/run).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the web UI tests drive a real browser (apt-get install chromium; .ci/run installs it)")
	return ""
}

// newBrowser starts a fresh headless Chromium with its own profile, quiet
// on the network (no background requests, no QUIC, no component updates),
// with a width×height window. It is killed when the test ends.
func newBrowser(t testing.TB, width, height int) *browser {
	t.Helper()
	// Not a t.TempDir: Chromium's helper processes may still write to the
	// profile for a moment after the browser exits, which a single
	// RemoveAll at the test's end would trip over.
	profile, err := os.MkdirTemp("", "chromium-profile-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication"),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("force-prefers-reduced-motion", true),
		chromedp.Flag("blink-settings", "preferredColorScheme=1"), // light: the screenshots in the docs
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelB()
		cancelA()
		if err := wait.Poll(10*time.Second, func() error { return os.RemoveAll(profile) }); err != nil {
			t.Errorf("removing the browser profile: %v", err)
		}
	})
	// The first Run launches the browser and ties it to ctx: a context
	// with a deadline here would close it when the deadline passed.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	b := &browser{t: t, ctx: ctx, dir: screenshotDir(t)}
	b.resize(width, height)
	return b
}

// resize sets the page's viewport. A headless window is at least 500 px
// wide: a phone's width is emulated, as a touch device.
func (b *browser) resize(width, height int) {
	b.t.Helper()
	vp := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if width < 600 {
		vp = append(vp, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	b.run("viewport", 10*time.Second, chromedp.EmulateViewport(int64(width), int64(height), vp...))
}

// run runs actions with a deadline; on failure it saves a screenshot and
// fails the test with the page's text.
func (b *browser) run(what string, timeout time.Duration, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		var text string
		tctx, tcancel := context.WithTimeout(b.ctx, 3*time.Second)
		_ = chromedp.Run(tctx, chromedp.Text("body", &text, chromedp.ByQuery))
		tcancel()
		b.t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

// waitText waits until the first node matching sel contains want.
func (b *browser) waitText(what, sel, want string, timeout time.Duration) string {
	b.t.Helper()
	var got string
	var err error
	if wait.Poll(timeout, func() error {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		err = chromedp.Run(ctx, chromedp.Text(sel, &got, chromedp.ByQuery, chromedp.AtLeast(0)))
		cancel()
		if err == nil && !strings.Contains(got, want) {
			return errors.New("not there yet")
		}
		return err
	}) != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %q never contained %q (last %q, err %v)", what, sel, want, got, err)
	}
	return got
}

// shot saves a PNG of the whole page as webui-NAME.png in the screenshot
// directory.
func (b *browser) shot(name string) {
	var png []byte
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, "webui-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot %s (%d KiB)", p, len(png)>>10)
}

// screenshotDir is where the pages' screenshots go: a temporary directory,
// or $OPENSTARRY_SCREENSHOTS (relative to the repository's root), which
// is how docs/img/ is refreshed.
func screenshotDir(t testing.TB) string {
	dir := os.Getenv("OPENSTARRY_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir) // the tests run in cmd/openstarry
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// a11yJS lists what keeps a page from being used with a screen reader or
// the keyboard alone: a control without a label, a button or link without
// a name, a progress bar without a label, a page without one h1, ids
// repeated or pointed at in vain, a positive tabindex (which breaks the
// keyboard's order).
const a11yJS = `(() => {
  const bad = [];
  if (!document.documentElement.lang) bad.push('html has no lang');
  const h1 = document.querySelectorAll('main h1').length;
  if (h1 !== 1) bad.push('main has ' + h1 + ' h1');
  for (const e of document.querySelectorAll('input, select, textarea')) {
    if (e.type === 'hidden') continue;
    if (!(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby'))
      bad.push('unlabelled ' + e.tagName.toLowerCase() + '#' + e.id);
  }
  for (const e of document.querySelectorAll('button, a[href]'))
    if (!(e.textContent.trim() || e.getAttribute('aria-label'))) bad.push('nameless ' + e.outerHTML.slice(0, 80));
  for (const e of document.querySelectorAll('progress'))
    if (!e.getAttribute('aria-label') && !(e.labels && e.labels.length)) bad.push('unlabelled progress');
  const ids = {};
  for (const e of document.querySelectorAll('[id]')) { if (ids[e.id]) bad.push('id twice: ' + e.id); ids[e.id] = true; }
  for (const e of document.querySelectorAll('[aria-describedby], [aria-labelledby]'))
    for (const a of ['aria-describedby', 'aria-labelledby'])
      for (const id of (e.getAttribute(a) || '').split(' ').filter(Boolean))
        if (!document.getElementById(id)) bad.push(a + ' names no element: ' + id);
  for (const e of document.querySelectorAll('[tabindex]')) if (e.tabIndex > 0) bad.push('positive tabindex on ' + e.tagName);
  return bad;
})()`

// checkA11y fails the test for each finding of a11yJS on the current page.
func (b *browser) checkA11y(page string) {
	b.t.Helper()
	var bad []string
	b.run("accessibility of "+page, 5*time.Second, chromedp.Evaluate(a11yJS, &bad))
	for _, f := range bad {
		b.t.Errorf("%s page: %s", page, f)
	}
}

// checkNarrow fails the test when the current page scrolls sideways.
func (b *browser) checkNarrow(page string) {
	b.t.Helper()
	var overflow bool
	b.run("width of "+page, 5*time.Second,
		chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
	if overflow {
		b.shot("failed-narrow-" + page)
		b.t.Errorf("the %s page scrolls sideways at a phone's width", page)
	}
}
