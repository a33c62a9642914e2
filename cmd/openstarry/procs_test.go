//go:build unix

package main

import (
	"io"
	"net/http"
	"regexp"
	"testing"
)

func TestDefaultProcs(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{nil, 1},
		{map[string]string{"GOMAXPROCS": ""}, 1},
		{map[string]string{"GOMAXPROCS": "3"}, 0},
		{map[string]string{"OTHER": "3"}, 1},
	} {
		if got := defaultProcs(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("env %v: %d, want %d", tc.env, got, tc.want)
		}
	}
}

// The daemon runs its Go code on one processor unless GOMAXPROCS says
// otherwise: its /metrics (go_gomaxprocs) says which.
func TestDaemonOneProcessor(t *testing.T) {
	procs := func(c *child) string {
		t.Helper()
		resp, err := http.Get(c.url() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^go_gomaxprocs (\d+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no go_gomaxprocs in /metrics:\n%s", body)
		}
		return string(m[1])
	}
	if got := procs(startDaemon(t, daemonConfig(t, dataDir(t), ""))); got != "1" {
		t.Errorf("go_gomaxprocs %s, want 1", got)
	}
	t.Setenv("GOMAXPROCS", "3")
	if got := procs(startDaemon(t, daemonConfig(t, dataDir(t), ""))); got != "3" {
		t.Errorf("with GOMAXPROCS=3: go_gomaxprocs %s, want 3", got)
	}
}
