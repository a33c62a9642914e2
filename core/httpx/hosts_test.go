package httpx

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	me, _ := os.Hostname()
	names := []string{"openstarry.lan", "*.fleet.example", " Upper.Example. "}
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"", true},
		{"127.0.0.1:7777", true},
		{"127.0.0.1", true},
		{"[::1]:7777", true},
		{"192.168.1.20:7777", true},
		{"localhost:7777", true},
		{"LOCALHOST.:7777", true},
		{"app.localhost:7777", true},
		{me + ":7777", me != ""},
		{"openstarry.lan:7777", true},
		{"OpenStarry.LAN", true},
		{"pi.fleet.example:7777", true},
		{"upper.example", true},
		{"fleet.example:7777", false},
		{"rebind.attacker.example:7777", false},
		{"127.0.0.1.nip.io:7777", false},
		{"localhost.attacker.example", false},
		{"openstarry.lan.attacker.example", false},
		{"[rebind.example]:7777", false},
		{":7777", false},
	} {
		if got := HostAllowed(tc.host, names); got != tc.ok {
			t.Errorf("HostAllowed(%q) = %v, want %v", tc.host, got, tc.ok)
		}
	}
}

func TestAllowHosts(t *testing.T) {
	ran := false
	h := AllowHosts(nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "http://rebind.attacker.example:7777/agents/master/tasks", nil)
	h.ServeHTTP(rec, r)
	if ran || rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"code":"bad_host"`) ||
		!strings.Contains(rec.Body.String(), "http.hosts") {
		t.Fatalf("ran %v, %d %s", ran, rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1:7777/", nil))
	if !ran || rec.Code != http.StatusOK {
		t.Fatalf("a loopback Host: ran %v, %d", ran, rec.Code)
	}
}
