//go:build unix

package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
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

func TestWithQuietSysmon(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		added    bool
	}{
		{"", "schedtrace=2147483647", true},
		{" ", "schedtrace=2147483647", true},
		{"gctrace=1", "gctrace=1,schedtrace=2147483647", true},
		{"schedtrace=0", "schedtrace=0", false},
		{"gctrace=1, schedtrace=1000", "gctrace=1, schedtrace=1000", false},
		{"scheddetail=1", "scheddetail=1,schedtrace=2147483647", true},
	} {
		got, added := withQuietSysmon(tc.in)
		if got != tc.want || added != tc.added {
			t.Errorf("withQuietSysmon(%q) = %q, %v; want %q, %v", tc.in, got, added, tc.want, tc.added)
		}
	}
}

// The daemon runs itself again with GODEBUG's schedtrace set (the
// environment a process was exec'd with is in /proc/PID/environ: the test
// does not set it, so it is there only after the daemon's own exec), and
// its agents, on bbolt or SQLite, inherit it; an operator's schedtrace
// wins.
func TestDaemonQuietSysmon(t *testing.T) {
	godebug := func(pid int) string {
		t.Helper()
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
				return v
			}
		}
		return ""
	}
	for _, tc := range []struct{ env, store, want string }{
		{"", "", "schedtrace=2147483647"},
		{"gctrace=0", "", "gctrace=0,schedtrace=2147483647"},
		{"", "sqlite://", "schedtrace=2147483647"},
		{"schedtrace=0", "", "schedtrace=0"},
	} {
		t.Setenv("GODEBUG", tc.env)
		extra := ""
		if tc.store != "" {
			extra = "store: " + tc.store + "\n"
		}
		c := startDaemon(t, daemonConfig(t, dataDir(t), extra))
		m := masterPIDRe.FindStringSubmatch(c.logs())
		if m == nil {
			t.Fatalf("no master pid in the daemon's log:\n%s", c.logs())
		}
		master, _ := strconv.Atoi(m[1])
		if got := godebug(c.cmd.Process.Pid); got != tc.want {
			t.Errorf("GODEBUG=%q store %q: the daemon's GODEBUG %q, want %q", tc.env, tc.store, got, tc.want)
		}
		if got := godebug(master); got != tc.want {
			t.Errorf("GODEBUG=%q store %q: the master's GODEBUG %q, want %q", tc.env, tc.store, got, tc.want)
		}
		// The exec kept the process's name (ps, top, pgrep).
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/comm")
		if want := filepath.Base(binPath); strings.TrimSpace(string(comm)) != want[:min(len(want), 15)] {
			t.Errorf("the daemon's name after its exec: %q, want %q", strings.TrimSpace(string(comm)), want)
		}
	}
}

func TestStartsDaemon(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"start"}, true},
		{[]string{"start", "--config", "c.yaml"}, true},
		{[]string{"--log-level", "debug", "start", "--data", "d"}, true},
		{[]string{"start", "--check"}, false},
		{[]string{"start", "--check=true"}, false},
		{[]string{"start", "--help"}, false},
		{[]string{"start", "-h"}, false},
		{[]string{"core", "--agent", "master"}, false},
		{[]string{"run", "--agent", "start"}, false},
		{[]string{"service", "start"}, false},
		{[]string{"status"}, false},
		{nil, false},
	} {
		if got := startsDaemon(tc.args); got != tc.want {
			t.Errorf("startsDaemon(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestDropDaemonProcs: an agent takes GOMAXPROCS out of its environment
// when the daemon put it there, and keeps an operator's.
func TestDropDaemonProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1")
	t.Setenv(control.EnvProcs, "1")
	dropDaemonProcs()
	for _, k := range []string{"GOMAXPROCS", control.EnvProcs} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%s left in the environment", k, v)
		}
	}
	t.Setenv("GOMAXPROCS", "4")
	dropDaemonProcs()
	if v := os.Getenv("GOMAXPROCS"); v != "4" {
		t.Errorf("the operator's GOMAXPROCS=4 became %q", v)
	}
}
