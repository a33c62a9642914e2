package httpget

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
