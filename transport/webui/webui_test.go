package webui

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

const token = "s3cret-token"

// apiStub stands for the daemon's API: it records what reaches it and
// answers 401 without the token from off loopback, as the daemon does.
type apiStub struct {
	mu  sync.Mutex
	got []*http.Request
}

func (a *apiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.got = append(a.got, r)
	a.mu.Unlock()
	if !fromLoopback(r) && r.Header.Get("Authorization") != "Bearer "+token {
		writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required from off loopback")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"ok": r.Method + " " + r.URL.Path})
}

func (a *apiStub) last() *http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.got) == 0 {
		return nil
	}
	return a.got[len(a.got)-1]
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newUI(t *testing.T, tok string) (*UI, http.Handler, *apiStub, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	u, err := New(Options{Token: tok, Log: zerolog.New(zerolog.NewTestWriter(t)), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	api := &apiStub{}
	return u, u.Wrap(api), api, clk
}

// req makes a request from remote (httptest's default is 192.0.2.1, off
// loopback).
func req(method, target, body, remote string, hdr ...string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	if remote != "" {
		r.RemoteAddr = remote
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// apiError decodes the one-line JSON error and checks its shape.
func apiError(t *testing.T, w *httptest.ResponseRecorder) (msg, code string) {
	t.Helper()
	body := w.Body.String()
	if strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("error body is not one line: %q", body)
	}
	var e struct{ Error, Code string }
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
		t.Fatalf("error body %q: want {\"error\",\"code\"} (%v)", body, err)
	}
	return e.Error, e.Code
}

func TestAssets(t *testing.T) {
	u, h, _, _ := newUI(t, "")
	if n := u.CompressedSize(); n > 200<<10 {
		t.Errorf("the UI is %d bytes compressed; the budget is 200 KiB", n)
	} else {
		t.Logf("the whole UI is %d bytes gzipped", n)
	}

	w := do(h, req("GET", "/", "", "", "Accept-Encoding", "gzip, deflate"))
	if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("GET / gzip: %d %v", w.Code, w.Header())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(zr)
	for _, hdr := range []string{"Content-Security-Policy", "X-Frame-Options", "ETag", "Cache-Control", "Vary"} {
		if w.Header().Get(hdr) == "" {
			t.Errorf("GET /: no %s", hdr)
		}
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("the page's Cache-Control %q: want no-cache (revalidated by ETag)", cc)
	}
	if bytes.Contains(page, []byte("http://")) || bytes.Contains(page, []byte("https://")) {
		t.Error("the page names another site: it must load nothing from elsewhere")
	}
	etag := w.Header().Get("ETag")
	if w := do(h, req("GET", "/", "", "", "Accept-Encoding", "gzip", "If-None-Match", etag)); w.Code != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", w.Code)
	}
	plain := do(h, req("GET", "/", "", ""))
	if plain.Header().Get("Content-Encoding") != "" || plain.Header().Get("ETag") == etag {
		t.Errorf("no Accept-Encoding: %v", plain.Header())
	}
	if !bytes.Equal(plain.Body.Bytes(), page) {
		t.Error("the gzipped page differs from the plain one")
	}
	if do(h, req("GET", "/", "", "", "Accept-Encoding", "gzip;q=0")).Header().Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 still got gzip")
	}

	// Every asset the page names is served, with its hash: immutable.
	refs := regexp.MustCompile(`"(/ui/[a-z.]+)\?v=([0-9a-f]{16})"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d hashed assets: %q", len(refs), page)
	}
	js := ""
	for _, m := range refs {
		w := do(h, req("GET", m[1]+"?v="+m[2], "", ""))
		if w.Code != 200 || !strings.Contains(w.Header().Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %q", m[1], w.Code, w.Header().Get("Cache-Control"))
		}
		if strings.HasSuffix(m[1], ".js") {
			js = w.Body.String()
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
				t.Errorf("app.js Content-Type %q", ct)
			}
		}
		// An old hash is not promised to last.
		if w := do(h, req("GET", m[1]+"?v=0000000000000000", "", "")); w.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("%s with a stale hash: Cache-Control %q", m[1], w.Header().Get("Cache-Control"))
		}
	}
	if strings.Contains(js, "http://") || strings.Contains(js, "https://") || strings.Contains(js, "innerHTML") {
		t.Error("app.js must call only this device and never build HTML from strings")
	}

	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/ui/nope.js", 404, "not_found"},
		{"POST", "/", 405, "method_not_allowed"},
		{"DELETE", "/ui/app.js", 405, "method_not_allowed"},
		{"GET", "/ui/login", 405, "method_not_allowed"},
		{"POST", "/ui/session", 405, "method_not_allowed"},
	} {
		w := do(h, req(tc.method, tc.path, "", "127.0.0.1:5000"))
		if w.Code != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, w.Code, tc.status)
			continue
		}
		if _, code := apiError(t, w); code != tc.code {
			t.Errorf("%s %s: code %q, want %q", tc.method, tc.path, code, tc.code)
		}
	}
}

func TestLoopbackNeedsNoLogin(t *testing.T) {
	_, h, api, _ := newUI(t, token)
	w := do(h, req("GET", "/ui/session", "", "127.0.0.1:4000"))
	var info sessionInfo
	_ = json.Unmarshal(w.Body.Bytes(), &info)
	if !info.Authenticated || info.LoginRequired || !info.Loopback {
		t.Errorf("loopback session %+v", info)
	}
	if w := do(h, req("POST", "/agents/master/tasks", `{}`, "[::1]:4000")); w.Code != 200 {
		t.Errorf("loopback POST: %d %s", w.Code, w.Body)
	}
	if a := api.last(); a.Header.Get("Authorization") != "" {
		t.Error("a loopback request got the token added")
	}
}

// login logs in from off loopback and returns the cookie and CSRF token.
func login(t *testing.T, h http.Handler, name string) (*http.Cookie, string) {
	t.Helper()
	w := do(h, req("POST", "/ui/login", `{"token":"`+token+`","name":"`+name+`"}`, "", "Content-Type", "application/json"))
	if w.Code != 200 {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	var c *http.Cookie
	for _, x := range w.Result().Cookies() {
		if x.Name == CookieName {
			c = x
		}
	}
	if c == nil {
		t.Fatal("no session cookie")
	}
	var info sessionInfo
	if err := json.Unmarshal(w.Body.Bytes(), &info); err != nil || info.CSRF == "" || info.Name != name {
		t.Fatalf("login answer %s", w.Body)
	}
	return c, info.CSRF
}

func TestLogin(t *testing.T) {
	_, h, api, clk := newUI(t, token)

	// Off loopback, nothing passes without the token.
	w := do(h, req("GET", "/status", "", ""))
	if w.Code != 401 {
		t.Fatalf("no credentials: %d", w.Code)
	}
	var info sessionInfo
	_ = json.Unmarshal(do(h, req("GET", "/ui/session", "", "")).Body.Bytes(), &info)
	if info.Authenticated || !info.LoginRequired {
		t.Errorf("anonymous session %+v", info)
	}

	c, csrf := login(t, h, "alice")
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, Max-Age", c)
	}
	if c.Secure {
		t.Error("Secure set over plain HTTP: the browser would never send it back")
	}
	cookie := CookieName + "=" + c.Value + "; other=kept"

	// A read with the cookie: the API sees the token, not the cookie.
	if w := do(h, req("GET", "/status", "", "", "Cookie", cookie)); w.Code != 200 {
		t.Fatalf("GET with the cookie: %d %s", w.Code, w.Body)
	}
	got := api.last()
	if got.Header.Get("Authorization") != "Bearer "+token || got.Header.Get(HeaderUser) != "alice" {
		t.Errorf("API got Authorization %q user %q", got.Header.Get("Authorization"), got.Header.Get(HeaderUser))
	}
	if strings.Contains(got.Header.Get("Cookie"), CookieName) || !strings.Contains(got.Header.Get("Cookie"), "other=kept") {
		t.Errorf("API got Cookie %q: want the session dropped, the rest kept", got.Header.Get("Cookie"))
	}

	// Writes need the CSRF token.
	n := len(api.got)
	for _, tc := range []struct{ name, csrf string }{{"none", ""}, {"wrong", "x" + csrf}} {
		w := do(h, req("POST", "/agents/master/tasks", `{}`, "", "Cookie", cookie, HeaderCSRF, tc.csrf))
		if w.Code != 403 {
			t.Errorf("POST with %s CSRF token: %d", tc.name, w.Code)
		} else if _, code := apiError(t, w); code != "csrf" {
			t.Errorf("POST with %s CSRF token: code %q", tc.name, code)
		}
	}
	if len(api.got) != n {
		t.Error("a request without the CSRF token reached the API")
	}
	if w := do(h, req("POST", "/agents/master/tasks", `{}`, "", "Cookie", cookie, HeaderCSRF, csrf)); w.Code != 200 {
		t.Errorf("POST with the CSRF token: %d %s", w.Code, w.Body)
	}

	// A session from the same cookie reports itself.
	_ = json.Unmarshal(do(h, req("GET", "/ui/session", "", "", "Cookie", cookie)).Body.Bytes(), &info)
	if !info.Authenticated || info.CSRF != csrf || info.Name != "alice" {
		t.Errorf("session %+v", info)
	}

	// It expires.
	clk.add(DefaultSessionTTL)
	w = do(h, req("GET", "/status", "", "", "Cookie", cookie))
	if _, code := apiError(t, w); w.Code != 401 || code != "session_expired" {
		t.Errorf("expired session: %d %s", w.Code, code)
	}

	// Logout ends a session (with its CSRF token only).
	c, csrf = login(t, h, "bob")
	cookie = CookieName + "=" + c.Value
	if w := do(h, req("POST", "/ui/logout", "", "", "Cookie", cookie)); w.Code != 403 {
		t.Errorf("logout without CSRF: %d", w.Code)
	}
	if w := do(h, req("POST", "/ui/logout", "", "", "Cookie", cookie, HeaderCSRF, csrf)); w.Code != 200 {
		t.Errorf("logout: %d", w.Code)
	}
	if w := do(h, req("GET", "/status", "", "", "Cookie", cookie)); w.Code != 401 {
		t.Errorf("after logout: %d", w.Code)
	}

	// A bearer token still works as before, cookie or not.
	if w := do(h, req("POST", "/x", "", "", "Authorization", "Bearer "+token)); w.Code != 200 {
		t.Errorf("bearer: %d", w.Code)
	}
}

func TestLoginRefusals(t *testing.T) {
	_, h, _, clk := newUI(t, token)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"wrong token", `{"token":"nope"}`, 401, "unauthorized"},
		{"not JSON", `token=x`, 400, "bad_request"},
		{"unknown field", `{"token":"x","admin":true}`, 400, "bad_request"},
		{"token of the wrong type", `{"token":5}`, 400, "bad_request"},
		{"bad name", `{"token":"` + token + `","name":"a\u0007b"}`, 400, "bad_name"},
		{"long name", `{"token":"` + token + `","name":"` + strings.Repeat("n", 65) + `"}`, 400, "bad_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(h, req("POST", "/ui/login", tc.body, "198.51.100.7:1"))
			if w.Code != tc.status {
				t.Fatalf("%d, want %d: %s", w.Code, tc.status, w.Body)
			}
			msg, code := apiError(t, w)
			if code != tc.code {
				t.Errorf("code %q, want %q", code, tc.code)
			}
			if strings.Contains(msg, "Go ") || strings.Contains(msg, "loginRequest") {
				t.Errorf("the message names a Go type: %s", msg)
			}
			if len(w.Result().Cookies()) != 0 {
				t.Error("a refused login set a cookie")
			}
		})
	}

	// Repeated failures from one address lock it out for a while, even
	// with the right token; another address is not affected.
	for i := 0; i < DefaultMaxFailures; i++ {
		do(h, req("POST", "/ui/login", `{"token":"guess"}`, "203.0.113.9:1"))
	}
	w := do(h, req("POST", "/ui/login", `{"token":"`+token+`"}`, "203.0.113.9:2"))
	if _, code := apiError(t, w); w.Code != 429 || code != "too_many_attempts" || w.Header().Get("Retry-After") == "" {
		t.Errorf("after %d failures: %d %s %q", DefaultMaxFailures, w.Code, code, w.Header().Get("Retry-After"))
	}
	if w := do(h, req("POST", "/ui/login", `{"token":"`+token+`"}`, "203.0.113.10:1")); w.Code != 200 {
		t.Errorf("another address: %d", w.Code)
	}
	clk.add(FailureWindow)
	if w := do(h, req("POST", "/ui/login", `{"token":"`+token+`"}`, "203.0.113.9:3")); w.Code != 200 {
		t.Errorf("after the window: %d", w.Code)
	}

	// No token configured: there is nothing to log in with.
	_, h2, _, _ := newUI(t, "")
	w = do(h2, req("POST", "/ui/login", `{"token":""}`, "127.0.0.1:1"))
	if _, code := apiError(t, w); w.Code != 400 || code != "login_disabled" {
		t.Errorf("no token: %d %s", w.Code, code)
	}
}

// TestCrossOrigin: a page of another site cannot make a browser change
// anything here, on loopback or with a session; reads and non-browser
// clients are unaffected.
func TestCrossOrigin(t *testing.T) {
	_, h, api, _ := newUI(t, token)
	c, csrf := login(t, h, "alice")
	cookie := CookieName + "=" + c.Value
	n := len(api.got)
	for _, tc := range []struct {
		name   string
		r      *http.Request
		status int
	}{
		{"cross-site fetch to loopback", req("POST", "/agents/master/tasks", `{}`, "127.0.0.1:1", "Sec-Fetch-Site", "cross-site"), 403},
		{"foreign Origin to loopback", req("POST", "/approvals/1", `{}`, "127.0.0.1:1", "Origin", "http://evil.example"), 403},
		{"cross-site login", req("POST", "/ui/login", `{"token":"`+token+`"}`, "", "Sec-Fetch-Site", "cross-site"), 403},
		{"cross-site with cookie and CSRF", req("POST", "/x", `{}`, "", "Cookie", cookie, HeaderCSRF, csrf, "Sec-Fetch-Site", "same-site"), 403},
		{"same-origin", req("POST", "/x", `{}`, "127.0.0.1:1", "Sec-Fetch-Site", "same-origin"), 200},
		{"curl", req("POST", "/x", `{}`, "127.0.0.1:1"), 200},
		{"cross-site read", req("GET", "/status", "", "127.0.0.1:1", "Sec-Fetch-Site", "cross-site"), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(h, tc.r)
			if w.Code != tc.status {
				t.Fatalf("%d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == 403 {
				if _, code := apiError(t, w); code != "cross_origin" {
					t.Errorf("code %q", code)
				}
			}
		})
	}
	if len(api.got) != n+3 {
		t.Errorf("%d requests reached the API, want the 3 allowed", len(api.got)-n)
	}
}

func FuzzLogin(f *testing.F) {
	f.Add(`{"token":"` + token + `","name":"alice"}`)
	f.Add(`{"token":1}`)
	f.Add(`{"name":"` + strings.Repeat("é", 70) + `"}`)
	f.Add("\x00\xff")
	u, err := New(Options{Token: token})
	if err != nil {
		f.Fatal(err)
	}
	h := u.Wrap(http.NotFoundHandler())
	f.Fuzz(func(t *testing.T, body string) {
		w := do(h, req("POST", "/ui/login", body, "192.0.2.1:1"))
		switch w.Code {
		case 200:
			var l loginRequest
			if json.Unmarshal([]byte(body), &l) != nil || l.Token != token {
				t.Fatalf("login accepted %q", body)
			}
		case 400, 401, 429:
			var e struct{ Error, Code string }
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code == "" {
				t.Fatalf("error body %q", w.Body)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}
