package design

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// fakeClock is the Fetcher's clock in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fenv is one device: a cache directory, a clock, a log and a signing key.
type fenv struct {
	cache string
	clock *fakeClock
	logs  *logBuffer
	pub   ed25519.PublicKey
	priv  ed25519.PrivateKey
}

func newFenv(t *testing.T) *fenv {
	pub, priv := testKey(t, 7)
	return &fenv{cache: filepath.Join(t.TempDir(), "templates-cache"), clock: &fakeClock{t: t0},
		logs: &logBuffer{}, pub: pub, priv: priv}
}

func (e *fenv) fetcher(t *testing.T, url string, mod func(*Options)) *Fetcher {
	t.Helper()
	o := Options{URL: url, CacheDir: e.cache, Timeout: 2 * time.Second, Retries: 2,
		BackoffBase: time.Millisecond, Logger: newLogger(e.logs), Now: e.clock.Now}
	if mod != nil {
		mod(&o)
	}
	f, err := NewFetcher(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (e *fenv) signed(o *Options) { o.TrustedKeys = []ed25519.PublicKey{e.pub} }

// recorder counts the requests a handler answers, by status.
type recorder struct {
	arrived  atomic.Int32 // requests received, counted before they are answered
	mu       sync.Mutex
	statuses []int
	inm      []string // If-None-Match of each request
}

func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.arrived.Add(1)
		sw := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(sw, r)
		rc.mu.Lock()
		rc.statuses = append(rc.statuses, sw.status)
		rc.inm = append(rc.inm, r.Header.Get("If-None-Match"))
		rc.mu.Unlock()
	})
}

func (rc *recorder) count() int { return int(rc.arrived.Load()) }

// request returns the status and If-None-Match of request i.
func (rc *recorder) request(i int) (status int, inm string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if i >= len(rc.statuses) {
		return 0, ""
	}
	return rc.statuses[i], rc.inm[i]
}

// designLayer serves files through the real Server handler; with sign, each
// template gets a .sig made with e's key.
func (e *fenv) designLayer(t *testing.T, files map[string][]byte, sign bool) (*httptest.Server, *recorder) {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: data}
		if sign {
			fsys[name+".sig"] = &fstest.MapFile{Data: []byte(Sign(e.priv, data) + "\n")}
		}
	}
	set, err := Validator{}.Load(fsys, "")
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{}
	srv := httptest.NewServer(rc.wrap(NewServer(set, newLogger(&logBuffer{}))))
	t.Cleanup(srv.Close)
	return srv, rc
}

// prime fetches master 1.0.0 once from a good, signed design layer, so the
// cache holds it, then takes the design layer away.
func (e *fenv) prime(t *testing.T) *Resolved {
	t.Helper()
	srv, _ := e.designLayer(t, map[string][]byte{
		"master.json": tmpl(t, "master", "master", withWorkers("worker")),
		"worker.json": tmpl(t, "worker", "worker"),
	}, true)
	r, err := e.fetcher(t, srv.URL, e.signed).Get(context.Background(), "master")
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	e.logs = &logBuffer{}
	return r
}

// refusedURL is the address of a listener that has been closed.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// oneWarning asserts exactly one warning line and returns it.
func oneWarning(t *testing.T, logs *logBuffer) map[string]any {
	t.Helper()
	w := logs.lines(t, "warn")
	if len(w) != 1 {
		t.Fatalf("%d warning lines, want 1:\n%s", len(w), logs)
	}
	return w[0]
}

func TestFetchRemote(t *testing.T) {
	e := newFenv(t)
	master := tmpl(t, "master", "master", withWorkers("worker"))
	srv, _ := e.designLayer(t, map[string][]byte{"master.json": master, "worker.json": tmpl(t, "worker", "worker")}, true)
	r, err := e.fetcher(t, srv.URL, e.signed).Get(context.Background(), "master")
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != SourceRemote || r.Version != "1.0.0" || r.Digest != Digest(master) || string(r.Raw) != string(master) ||
		!r.FetchedAt.Equal(t0) || r.Template.Name != "master" || r.Location != srv.URL+"/templates/master" || r.Signature == "" {
		t.Fatalf("resolved = %+v", r)
	}
	// The cache holds the exact bytes and the sidecar, and nothing else.
	got, _ := os.ReadFile(filepath.Join(e.cache, "master.json"))
	if string(got) != string(master) {
		t.Error("cached bytes differ")
	}
	var m cacheMeta
	mb, _ := os.ReadFile(filepath.Join(e.cache, "master.meta.json"))
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	if m.ETag != `"`+Digest(master)+`"` || m.Digest != Digest(master) || m.Signature != r.Signature || !m.FetchedAt.Equal(t0) || m.Version != "1.0.0" {
		t.Errorf("meta = %+v", m)
	}
	des, _ := os.ReadDir(e.cache)
	if len(des) != 2 {
		t.Errorf("cache dir holds %d files, want 2 (no temp files left)", len(des))
	}
	if len(e.logs.lines(t, "warn")) != 0 {
		t.Errorf("warnings on a good fetch:\n%s", e.logs)
	}
}

func TestFetchNotModified(t *testing.T) {
	e := newFenv(t)
	srv, rc := e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master")}, true)
	f := e.fetcher(t, srv.URL, e.signed)
	first, err := f.Get(context.Background(), "master")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	second, err := f.Get(context.Background(), "master")
	if err != nil {
		t.Fatal(err)
	}
	if st, inm := rc.request(1); st != http.StatusNotModified || inm != `"`+first.Digest+`"` {
		t.Fatalf("second request: status %d, If-None-Match %q", st, inm)
	}
	if second.Source != SourceRemote || string(second.Raw) != string(first.Raw) || !second.FetchedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("304 resolved = %+v", second)
	}
	// fetched_at was renewed on disk: a later degraded boot counts from here.
	c, err := readCache(e.cache, "master", Validator{}, []ed25519.PublicKey{e.pub})
	if err != nil || !c.meta.FetchedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("cache after 304: %v, %v", c, err)
	}
}

func TestFetchFallsBackToCache(t *testing.T) {
	const ago = 3*time.Hour + 12*time.Minute
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	other, otherPriv := testKey(t, 9)
	_ = other

	tests := []struct {
		name     string
		handler  http.HandlerFunc // nil: a refused connection
		mod      func(*Options)
		attempts int    // requests the handler should see
		msg      string // the warning's message
		errHas   string // in the warning's error field
	}{
		{
			name:   "connection refused",
			msg:    "design layer unreachable: booting cached template master 1.0.0 fetched 3h12m ago: connection refused",
			errHas: "refused",
		},
		{
			name: "500",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, 500, "internal", "disk on fire")
			},
			attempts: 3,
			msg:      "design layer unreachable: booting cached template master 1.0.0 fetched 3h12m ago: HTTP 500",
			errHas:   "disk on fire",
		},
		{
			name: "timeout",
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-hang:
				}
			},
			mod:      func(o *Options) { o.Timeout = 50 * time.Millisecond; o.Retries = 1 },
			attempts: 2,
			msg:      "design layer unreachable: booting cached template master 1.0.0 fetched 3h12m ago: timeout after 50ms",
			errHas:   "deadline",
		},
		{
			name: "invalid JSON",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"name": "master",`))
			},
			attempts: 1,
			msg:      "design layer answer refused: booting cached template master 1.0.0 fetched 3h12m ago: invalid template",
			errHas:   "syntax",
		},
		{
			name: "invalid template",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write(tmpl(t, "master", "master", func(m map[string]any) { m["tools"] = []any{"rm_rf"} }))
			},
			attempts: 1,
			msg:      "design layer answer refused: booting cached template master 1.0.0 fetched 3h12m ago: invalid template",
			errHas:   "/tools/0: unknown_tool",
		},
		{
			name: "another template under the name",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write(tmpl(t, "worker", "worker"))
			},
			attempts: 1,
			msg:      "design layer answer refused: booting cached template master 1.0.0 fetched 3h12m ago: invalid template",
			errHas:   "name_match",
		},
		{
			name: "bad signature",
			handler: func(w http.ResponseWriter, r *http.Request) {
				data := tmpl(t, "master", "master", withVersion("2.0.0"))
				w.Header().Set(SignatureHeader, Sign(otherPriv, data))
				w.Write(data)
			},
			attempts: 1,
			msg:      "design layer answer refused: booting cached template master 1.0.0 fetched 3h12m ago: bad signature",
			errHas:   "does not match",
		},
		{
			name: "unsigned",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write(tmpl(t, "master", "master", withVersion("2.0.0")))
			},
			attempts: 1,
			msg:      "design layer answer refused: booting cached template master 1.0.0 fetched 3h12m ago: bad signature",
			errHas:   "not signed",
		},
		{
			name:     "404 from something else",
			handler:  http.NotFound,
			attempts: 1,
			msg:      "design layer unreachable: booting cached template master 1.0.0 fetched 3h12m ago: HTTP 404 from something that is not a design layer",
			errHas:   "404",
		},
		{
			name: "403",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, 403, "forbidden", "device not enrolled")
			},
			attempts: 1,
			msg:      "design layer unreachable: booting cached template master 1.0.0 fetched 3h12m ago: HTTP 403",
			errHas:   "device not enrolled",
		},
		{
			name: "304 without a question",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotModified)
			},
			// The cache's ETag is sent, so the 304 is legitimate here: the
			// design layer confirms the cached copy.
			attempts: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newFenv(t)
			primed := e.prime(t)
			e.clock.Advance(ago)
			url := refusedURL(t)
			rc := &recorder{}
			if tc.handler != nil {
				srv := httptest.NewServer(rc.wrap(tc.handler))
				t.Cleanup(srv.Close)
				url = srv.URL
			}
			opts := func(o *Options) {
				e.signed(o)
				if tc.mod != nil {
					tc.mod(o)
				}
			}
			start := time.Now()
			r, err := e.fetcher(t, url, opts).Get(context.Background(), "master")
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("fallback took %v", time.Since(start))
			}
			if rc.count() != tc.attempts {
				t.Errorf("%d requests, want %d", rc.count(), tc.attempts)
			}
			if string(r.Raw) != string(primed.Raw) || r.Version != "1.0.0" || r.Digest != primed.Digest {
				t.Fatalf("resolved %+v, want the cached master 1.0.0", r)
			}
			if tc.msg == "" {
				if r.Source != SourceRemote || len(e.logs.lines(t, "warn")) != 0 {
					t.Fatalf("source %s, logs:\n%s", r.Source, e.logs)
				}
				return
			}
			if r.Source != SourceCache || !r.FetchedAt.Equal(t0) {
				t.Errorf("source %s fetched %v, want cache fetched %v", r.Source, r.FetchedAt, t0)
			}
			w := oneWarning(t, e.logs)
			if w["message"] != tc.msg {
				t.Errorf("warning:\n%q\nwant:\n%q", w["message"], tc.msg)
			}
			if w["template"] != "master" || w["version"] != "1.0.0" || !strings.Contains(w["error"].(string), tc.errHas) ||
				w["url"] != url+"/templates/master" {
				t.Errorf("warning fields: %v", w)
			}
		})
	}
}

func TestFetchRetriesThenSucceeds(t *testing.T) {
	e := newFenv(t)
	var n atomic.Int32
	master := tmpl(t, "master", "master")
	rc := &recorder{}
	srv := httptest.NewServer(rc.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			writeError(w, 503, "busy", "starting")
			return
		}
		w.Write(master)
	})))
	defer srv.Close()
	r, err := e.fetcher(t, srv.URL, func(o *Options) { o.Retries = 3 }).Get(context.Background(), "master")
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != SourceRemote || rc.count() != 3 {
		t.Fatalf("source %s after %d requests", r.Source, rc.count())
	}
	if len(e.logs.lines(t, "warn")) != 0 || len(e.logs.lines(t, "debug")) != 2 {
		t.Errorf("logs:\n%s", e.logs)
	}
}

func TestFetchNoRemoteNoCache(t *testing.T) {
	e := newFenv(t)
	url := refusedURL(t)
	f := e.fetcher(t, url, nil)
	_, err := f.Get(context.Background(), "master")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{url + "/templates/master", filepath.Join(e.cache, "master.json"), "connection refused", "no cached copy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	f = e.fetcher(t, url, func(o *Options) { o.CacheDir = "" })
	if _, err := f.Get(context.Background(), "master"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no cache directory") {
		t.Fatalf("err = %v", err)
	}
}

// A 404 "template_not_found" from a design layer is its answer, not its
// absence: no fallback, and the cached copy goes.
func TestFetchNotFoundWithdrawsTemplate(t *testing.T) {
	e := newFenv(t)
	e.prime(t)
	srv, _ := e.designLayer(t, map[string][]byte{"worker.json": tmpl(t, "worker", "worker")}, true)
	_, err := e.fetcher(t, srv.URL, e.signed).Get(context.Background(), "master")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "template master not found on design layer "+srv.URL) {
		t.Fatalf("err = %v", err)
	}
	for _, p := range []string{"master.json", "master.meta.json"} {
		if _, err := os.Stat(filepath.Join(e.cache, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still cached: %v", p, err)
		}
	}
	if len(e.logs.lines(t, "warn")) != 0 {
		t.Errorf("warnings:\n%s", e.logs)
	}
	// And with the design layer gone, there is nothing to boot.
	if _, err := e.fetcher(t, refusedURL(t), e.signed).Get(context.Background(), "master"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after withdrawal: %v", err)
	}
}

func TestCachedCopyRefused(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, e *fenv)
		mod    func(*Options)
		want   error
		has    string
	}{
		{
			name: "byte changed",
			tamper: func(t *testing.T, e *fenv) {
				p := filepath.Join(e.cache, "master.json")
				data, _ := os.ReadFile(p)
				os.WriteFile(p, []byte(strings.Replace(string(data), "You are", "You Are", 1)), 0o644)
			},
			want: ErrCacheInvalid,
			has:  "changed after it was fetched",
		},
		{
			name: "byte changed and digest rewritten",
			tamper: func(t *testing.T, e *fenv) {
				p := filepath.Join(e.cache, "master.json")
				data, _ := os.ReadFile(p)
				data = []byte(strings.Replace(string(data), "You are", "You Are", 1))
				os.WriteFile(p, data, 0o644)
				var m cacheMeta
				mb, _ := os.ReadFile(filepath.Join(e.cache, "master.meta.json"))
				json.Unmarshal(mb, &m)
				m.Digest = Digest(data)
				mb, _ = json.Marshal(m)
				os.WriteFile(filepath.Join(e.cache, "master.meta.json"), mb, 0o644)
			},
			want: ErrBadSignature,
			has:  "does not match the template's bytes",
		},
		{
			name: "sidecar lost",
			tamper: func(t *testing.T, e *fenv) {
				os.Remove(filepath.Join(e.cache, "master.meta.json"))
			},
			want: ErrCacheInvalid,
			has:  "sidecar",
		},
		{
			name:   "no longer valid for this device",
			tamper: func(t *testing.T, e *fenv) {},
			mod: func(o *Options) {
				o.Validator = Validator{KnownTool: func(n string) bool { return n == "sleep_ms" }}
			},
			want: ErrCacheInvalid,
			has:  "no longer validates",
		},
		{
			name:   "key rotated away",
			tamper: func(t *testing.T, e *fenv) {},
			mod: func(o *Options) {
				k, _ := testKey(t, 42)
				o.TrustedKeys = []ed25519.PublicKey{k}
			},
			want: ErrBadSignature,
			has:  "does not match",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newFenv(t)
			e.prime(t)
			tc.tamper(t, e)
			opts := func(o *Options) {
				e.signed(o)
				if tc.mod != nil {
					tc.mod(o)
				}
			}
			_, err := e.fetcher(t, refusedURL(t), opts).Get(context.Background(), "master")
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.has) {
				t.Fatalf("err = %v\nwant ErrUnavailable, %v, %q", err, tc.want, tc.has)
			}
			if !strings.Contains(err.Error(), filepath.Join(e.cache, "master.json")) {
				t.Errorf("error does not name the cached file: %v", err)
			}
		})
	}
}

// A refused cache entry does not stop a good fetch, which replaces it.
func TestFetchReplacesRefusedCache(t *testing.T) {
	e := newFenv(t)
	e.prime(t)
	p := filepath.Join(e.cache, "master.json")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, append(data, ' '), 0o644)
	srv, rc := e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master")}, true)
	r, err := e.fetcher(t, srv.URL, e.signed).Get(context.Background(), "master")
	if err != nil || r.Source != SourceRemote {
		t.Fatalf("%v %v", r, err)
	}
	if _, inm := rc.request(0); inm != "" {
		t.Errorf("sent If-None-Match %q for a refused cache entry", inm)
	}
	w := oneWarning(t, e.logs)
	if !strings.Contains(w["message"].(string), "cached template refused") {
		t.Errorf("warning = %v", w)
	}
	if _, err := readCache(e.cache, "master", Validator{}, []ed25519.PublicKey{e.pub}); err != nil {
		t.Errorf("cache not repaired: %v", err)
	}
}

func TestFetchCancelled(t *testing.T) {
	e := newFenv(t)
	e.prime(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.fetcher(t, refusedURL(t), e.signed).Get(ctx, "master")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestFetchBadInput(t *testing.T) {
	e := newFenv(t)
	f := e.fetcher(t, "http://127.0.0.1:1", nil)
	for _, name := range []string{"", "../etc/passwd", "Master", "a/b", strings.Repeat("a", 65)} {
		if _, err := f.Get(context.Background(), name); !errors.Is(err, ErrInvalidTemplate) {
			t.Errorf("Get(%q) = %v", name, err)
		}
	}
	for _, u := range []string{"", "ftp://x", "127.0.0.1:8780", "http://"} {
		if _, err := NewFetcher(Options{URL: u}); err == nil {
			t.Errorf("NewFetcher(%q) accepted", u)
		}
	}
	f, _ = NewFetcher(Options{URL: "http://h:1/design/"})
	if f.URL("master") != "http://h:1/design/templates/master" {
		t.Errorf("URL = %s", f.URL("master"))
	}
	if f.o.Timeout != DefaultTimeout || f.o.Retries != DefaultRetries || f.o.BackoffBase != DefaultBackoffBase {
		t.Errorf("defaults = %+v", f.o)
	}
}

func TestBackoff(t *testing.T) {
	f, _ := NewFetcher(Options{URL: "http://h"})
	for n, base := range []time.Duration{200, 400, 800, 1600, 3200, 5000, 5000} {
		base *= time.Millisecond
		for range 50 {
			d := f.backoff(n)
			if d < base/2 || d >= base*3/2 {
				t.Fatalf("backoff(%d) = %v, want [%v, %v)", n, d, base/2, base*3/2)
			}
		}
	}
}

func TestHumanAgeAndClockSkew(t *testing.T) {
	for d, want := range map[time.Duration]string{
		42 * time.Second:               "42s",
		12*time.Minute + 5*time.Second: "12m5s",
		3*time.Hour + 12*time.Minute:   "3h12m",
		100 * time.Hour:                "4d4h",
	} {
		if got := HumanAge(d); got != want {
			t.Errorf("HumanAge(%v) = %s, want %s", d, got, want)
		}
	}
	e := newFenv(t)
	f := e.fetcher(t, "http://h", nil)
	if got := f.age(t0.Add(time.Hour)); !strings.Contains(got, "clock is behind") {
		t.Errorf("age in the future = %q", got)
	}
	if got := f.age(time.Time{}); got != "fetched at an unknown time" {
		t.Errorf("zero age = %q", got)
	}
}

// Several agents of one device resolve at once through one cache.
func TestFetchConcurrent(t *testing.T) {
	e := newFenv(t)
	srv, _ := e.designLayer(t, map[string][]byte{"master.json": tmpl(t, "master", "master"), "worker.json": tmpl(t, "worker", "worker")}, true)
	f := e.fetcher(t, srv.URL, e.signed)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"master", "worker"}[i%2]
			r, err := f.Get(context.Background(), name)
			if err == nil && r.Template.Name != name {
				err = errors.New("wrong template")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
