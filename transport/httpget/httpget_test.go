package httpget

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/tool"
)

func run(t *testing.T, env tool.Env, args string) (map[string]any, error) {
	t.Helper()
	tl, err := tool.Lookup("http_get")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tl.Run(context.Background(), env, json.RawMessage(args))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("http_get output %s: %v", out, err)
	}
	return m, nil
}

func TestHTTPGetAllowlist(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/status":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/api/away":
			http.Redirect(w, r, "/private/x", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	env := tool.Env{Services: map[string]any{tool.ServiceHTTPAllowlist: []string{srv.URL + "/api/"}}}
	m, err := run(t, env, `{"url":"`+srv.URL+`/api/status"}`)
	if err != nil || m["status"] != float64(200) || m["body"] != `{"ok":true}` || m["content_type"] != "application/json" {
		t.Fatalf("get = %v, %v", m, err)
	}
	refused := []struct{ args, want string }{
		{`{"url":"` + srv.URL + `/private/x"}`, "not in the http_allowlist"},
		{`{"url":"` + srv.URL + `/apix"}`, "not in the http_allowlist"},
		{`{"url":"` + srv.URL + `/api/away"}`, "outside the http_allowlist"},
		{`{"url":"file:///etc/passwd"}`, "not an absolute http"},
		{`{"url":7}`, "bad arguments"},
	}
	for _, tc := range refused {
		if _, err := run(t, env, tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := run(t, tool.Env{}, `{"url":"`+srv.URL+`/api/status"}`); err == nil || !strings.Contains(err.Error(), "no http_allowlist") {
		t.Errorf("no allowlist: err = %v", err)
	}
}

func TestAllowed(t *testing.T) {
	allow := []string{"http://127.0.0.1:8080/api/", "https://example.com"}
	cases := []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/api/x", true},
		{"http://127.0.0.1:8080/api/", true},
		{"http://127.0.0.1:8080/api", false},
		{"http://127.0.0.1:8080/apix", false},
		{"http://127.0.0.1:8081/api/x", false},
		{"https://127.0.0.1:8080/api/x", false},
		{"https://example.com/anything", true},
		{"https://example.com.evil.net/", false},
		{"https://user@example.com/", false},
	}
	for _, tc := range cases {
		u, _ := url.Parse(tc.url)
		if got := Allowed(u, allow); got != tc.ok {
			t.Errorf("Allowed(%s) = %v, want %v", tc.url, got, tc.ok)
		}
	}
}

// TestHTTPGetDotSegments: with the allowlist "/ok/", no spelling of a path
// that a server resolves outside /ok/ reaches it (dot segments, encoded
// dots and slashes, backslashes, an upper-case scheme, a redirect), and a
// spelling that stays inside is fetched at its normal form. The server
// resolves paths the way file servers do (decoded, backslashes as
// slashes, then cleaned).
func TestHTTPGetDotSegments(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + strings.ReplaceAll(r.URL.Path, `\`, "/"))
		switch {
		case p == "/ok/jump":
			w.Header().Set("Location", "/ok/%2e%2e/secret/s.txt")
			w.WriteHeader(http.StatusFound)
		case strings.HasPrefix(p, "/ok/"):
			_, _ = w.Write([]byte("public " + r.URL.EscapedPath()))
		case strings.HasPrefix(p, "/secret/"):
			mu.Lock()
			leaked = append(leaked, r.URL.RequestURI())
			mu.Unlock()
			_, _ = w.Write([]byte("SECRET"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	env := tool.Env{Services: map[string]any{tool.ServiceHTTPAllowlist: []string{srv.URL + "/ok/"}}}
	for _, p := range []string{
		"http://HOST/ok/../secret/s.txt",
		"http://HOST/ok/%2e%2e/secret/s.txt",
		"http://HOST/ok/%2E%2E/secret/s.txt",
		"http://HOST/ok/.%2e/secret/s.txt",
		"http://HOST/ok/..%2fsecret/s.txt",
		"http://HOST/ok/%2e%2e%2fsecret/s.txt",
		"http://HOST/ok/./../secret/s.txt",
		"http://HOST/ok/sub/../../secret/s.txt",
		"HTTP://HOST/ok/../secret/s.txt",
		"HtTp://HOST/ok/%2e%2e/secret/s.txt",
		`http://HOST/ok/..\secret\s.txt`,
		"http://HOST/ok/..%5csecret/s.txt",
		"http://HOST/ok/.../secret/s.txt",
		"http://HOST/ok/%00/../../secret/s.txt",
		"http://HOST/../secret/s.txt",
		"http://HOST/ok/jump",
	} {
		u := strings.Replace(p, "HOST", host, 1)
		args, _ := json.Marshal(map[string]string{"url": u})
		m, err := run(t, env, string(args))
		if err == nil {
			t.Errorf("%s: fetched %v", u, m)
			continue
		}
		if !strings.Contains(err.Error(), "http_allowlist") && !strings.Contains(err.Error(), "normalised") {
			t.Errorf("%s: refused for an unexpected reason: %v", u, err)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the secret was served for %q", leaked)
	}
	for _, tc := range []struct{ url, path string }{
		{"http://HOST/ok/s.txt", "/ok/s.txt"},
		{"HTTP://HOST/ok/s.txt", "/ok/s.txt"},
		{"http://HOST/ok/sub/../s.txt", "/ok/s.txt"},
		{"http://HOST/ok/./%73.txt", "/ok/s.txt"},
		{"http://HOST/ok/a%20b", "/ok/a%20b"},
	} {
		u := strings.Replace(tc.url, "HOST", host, 1)
		args, _ := json.Marshal(map[string]string{"url": u})
		m, err := run(t, env, string(args))
		if err != nil || m["body"] != "public "+tc.path {
			t.Errorf("%s: %v %v, want the server to see %s", u, m, err, tc.path)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"HTTP://Example.COM:80/a/./b/../c", "http://example.com/a/c"},
		{"https://example.com.:443/x/..", "https://example.com/"},
		{"https://example.com:8443", "https://example.com:8443/"},
		{"http://[::1]:8080/a/%7e#frag", "http://[::1]:8080/a/~"},
		{"http://h/a/%2e", "http://h/a/"},
		{"http://h/a?q=../x", "http://h/a?q=../x"},
		{"http://h/..", ""},
		{"http://h/a%2fb", ""},
		{"http://h/a%5cb", ""},
		{"http://u:p@h/", ""},
		{"ftp://h/", ""},
		{"http://h/.. /x", ""},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		n, err := Normalize(u)
		switch {
		case tc.out == "" && err == nil:
			t.Errorf("Normalize(%s) = %s, want an error", tc.in, n)
		case tc.out != "" && (err != nil || n.String() != tc.out):
			t.Errorf("Normalize(%s) = %v %v, want %s", tc.in, n, err, tc.out)
		}
	}
}

// FuzzAllowed: a URL the allowlist admits is, once normalised, under the
// prefix's path with no dot segment a server could resolve out of it.
func FuzzAllowed(f *testing.F) {
	for _, s := range []string{"http://h/ok/x", "http://h/ok/../x", "http://h/ok/%2e%2e/x", "HTTP://H/ok/./a", "http://h/ok/..%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || !Allowed(u, []string{"http://h/ok/"}) {
			return
		}
		n, err := Normalize(u)
		if err != nil {
			t.Fatalf("%q allowed but not normal: %v", raw, err)
		}
		p := path.Clean(strings.ReplaceAll(n.Path, `\`, "/"))
		if !strings.HasPrefix(p+"/", "/ok/") {
			t.Fatalf("%q allowed, and a server resolves it to %q", raw, p)
		}
	})
}
