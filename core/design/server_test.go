package design

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestServerHandler(t *testing.T) {
	_, priv := testKey(t, 5)
	master := tmpl(t, "master", "master", withWorkers("worker"))
	fsys := fstest.MapFS{
		"master.json":     {Data: master},
		"master.json.sig": {Data: []byte(Sign(priv, master) + "\n")},
		"worker.json":     {Data: tmpl(t, "worker", "worker")},
	}
	set, err := Validator{}.Load(fsys, "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	h := NewServer(set, newLogger(logs))
	etag := `"` + Digest(master) + `"`

	tests := []struct {
		name, method, path, inm string
		status                  int
		code                    string // JSON error code
		body                    string // exact body, when not an error
	}{
		{name: "template", method: "GET", path: "/templates/master", status: 200, body: string(master)},
		{name: "head", method: "HEAD", path: "/templates/master", status: 200},
		{name: "etag match", method: "GET", path: "/templates/master", inm: etag, status: 304},
		{name: "weak etag match", method: "GET", path: "/templates/master", inm: "W/" + etag, status: 304},
		{name: "etag list", method: "GET", path: "/templates/master", inm: `"x", ` + etag, status: 304},
		{name: "etag star", method: "GET", path: "/templates/master", inm: "*", status: 304},
		{name: "etag stale", method: "GET", path: "/templates/master", inm: `"sha256:old"`, status: 200, body: string(master)},
		{name: "unknown template", method: "GET", path: "/templates/nope", status: 404, code: CodeTemplateNotFound},
		{name: "nested path", method: "GET", path: "/templates/a/b", status: 404, code: CodeNotFound},
		{name: "unknown route", method: "GET", path: "/nope", status: 404, code: CodeNotFound},
		{name: "post", method: "POST", path: "/templates/master", status: 405, code: CodeMethodNotAllowed},
		{name: "delete list", method: "DELETE", path: "/templates", status: 405, code: CodeMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.inm != "" {
				req.Header.Set("If-None-Match", tc.inm)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.code != "" {
				var e struct{ Error, Code string }
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != tc.code || e.Error == "" {
					t.Fatalf("error body %s (%v), want code %s", rec.Body, err, tc.code)
				}
				if rec.Header().Get("Content-Type") != "application/json" {
					t.Errorf("content type %q", rec.Header().Get("Content-Type"))
				}
				if tc.status == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
					t.Errorf("Allow = %q", rec.Header().Get("Allow"))
				}
				return
			}
			if rec.Body.String() != tc.body {
				t.Errorf("body %q, want %q", rec.Body, tc.body)
			}
			if rec.Header().Get("ETag") != etag || rec.Header().Get(SignatureHeader) != Sign(priv, master) {
				t.Errorf("headers %v", rec.Header())
			}
		})
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/templates", nil))
	var list []listItem
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list) != 2 {
		t.Fatalf("list %s: %v", rec.Body, err)
	}
	if list[0] != (listItem{Name: "master", Version: "1.0.0", Role: "master", Digest: Digest(master), Signed: true}) || list[1].Name != "worker" || list[1].Signed {
		t.Errorf("list = %+v", list)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/templates/worker", nil))
	if rec.Header().Get(SignatureHeader) != "" {
		t.Error("unsigned template sent a signature header")
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"templates":2`) {
		t.Errorf("healthz %d %s", rec.Code, rec.Body)
	}

	debug := logs.lines(t, "debug")
	if len(debug) != len(tests)+3 {
		t.Errorf("%d debug lines for %d requests", len(debug), len(tests)+3)
	}
	if d := debug[0]; d["method"] != "GET" || d["path"] != "/templates/master" || d["status"] != float64(200) {
		t.Errorf("request log %v", d)
	}
}

// The real design layer, end to end: keys and signatures made as an
// operator makes them, served by Server, fetched by a device's Fetcher:
// 200, 304, a reload with a new version, then the design layer gone.
func TestDesignLayerEndToEnd(t *testing.T) {
	dir := t.TempDir()
	keyPrefix := filepath.Join(t.TempDir(), "fleet")
	pub, err := GenerateKeyFiles(keyPrefix, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ReadPrivateKeyFile(keyPrefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(version string) {
		t.Helper()
		writeFiles(t, dir, map[string][]byte{
			"master.json": tmpl(t, "master", "master", withWorkers("worker"), withVersion(version)),
			"worker.json": tmpl(t, "worker", "worker"),
		})
		for _, n := range []string{"master.json", "worker.json"} {
			if _, err := SignFile(Validator{}, priv, filepath.Join(dir, n), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	load := func() *Set {
		t.Helper()
		set, err := Validator{}.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if errs := VerifySet(set, []ed25519.PublicKey{pub}); len(errs) > 0 {
			t.Fatal(errs)
		}
		return set
	}

	publish("1.0.0")
	server := NewServer(load(), zeroLogger())
	rc := &recorder{}
	ts := httptest.NewServer(rc.wrap(server))
	defer ts.Close()

	e := newFenv(t)
	f := e.fetcher(t, ts.URL, func(o *Options) { o.TrustedKeys = []ed25519.PublicKey{pub} })
	res := NewResolver(ResolverOptions{Fetcher: f, Dir: t.TempDir(), Embedded: Shipped()})
	ctx := context.Background()

	r, err := res.Resolve(ctx, "master")
	if err != nil || r.Source != SourceRemote || r.Version != "1.0.0" {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err = res.Resolve(ctx, "master")
	if st, _ := rc.request(1); err != nil || st != http.StatusNotModified || r.Source != SourceRemote {
		t.Fatalf("second: status %d, %+v %v", st, r, err)
	}

	publish("1.1.0")
	server.Swap(load())
	r, err = res.Resolve(ctx, "master")
	if st, _ := rc.request(2); err != nil || st != http.StatusOK || r.Version != "1.1.0" {
		t.Fatalf("after reload: status %d, %+v %v", st, r, err)
	}
	want := map[string]any{"template_name": "master", "template_version": "1.1.0", "template_digest": r.Digest, "template_source": "remote"}
	if got := r.Vars(); !equalVars(got, want) {
		t.Errorf("Vars = %v", got)
	}

	// A tampered file on the server is refused by the device.
	data, _ := os.ReadFile(filepath.Join(dir, "worker.json"))
	os.WriteFile(filepath.Join(dir, "worker.json"), append(data, ' '), 0o644)
	set, err := Validator{}.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if errs := VerifySet(set, []ed25519.PublicKey{pub}); len(errs) != 1 || !strings.Contains(errs.Error(), "worker.json: /: signature") {
		t.Fatalf("VerifySet = %v", errs)
	}
	server.Swap(set)
	if _, err := res.Resolve(ctx, "worker"); err == nil {
		t.Fatal("tampered worker accepted with no cache")
	}

	ts.Close()
	e.clock.Advance(25 * time.Minute)
	e.logs = &logBuffer{}
	f = e.fetcher(t, ts.URL, func(o *Options) { o.TrustedKeys = []ed25519.PublicKey{pub} })
	r, err = NewResolver(ResolverOptions{Fetcher: f}).Resolve(ctx, "master")
	if err != nil || r.Source != SourceCache || r.Version != "1.1.0" {
		t.Fatalf("degraded: %+v %v", r, err)
	}
	w := oneWarning(t, e.logs)
	if w["message"] != "design layer unreachable: booting cached template master 1.1.0 fetched 25m0s ago: connection refused" {
		t.Errorf("warning %q", w["message"])
	}
	if r.Vars()["template_source"] != "cache" {
		t.Errorf("Vars = %v", r.Vars())
	}
}

func equalVars(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
