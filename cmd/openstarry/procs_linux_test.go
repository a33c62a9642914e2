package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// TestAgentsStartWithOneProcessor: the daemon starts its agents with
// GOMAXPROCS=1 in their environment, so that their runtime has one
// processor from its start (the daemon's launchSpec), unless the operator
// set GOMAXPROCS for the daemon: the agents then get the operator's.
func TestAgentsStartWithOneProcessor(t *testing.T) {
	for _, tc := range []struct {
		operator string
		want     []string
		not      []string
	}{
		{"", []string{"GOMAXPROCS=1", control.EnvProcs + "=1"}, nil},
		{"2", []string{"GOMAXPROCS=2"}, []string{"GOMAXPROCS=1", control.EnvProcs + "=1"}},
	} {
		t.Run("operator="+tc.operator, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.operator)
			data := dataDir(t)
			startDaemon(t, daemonConfig(t, data, ""))
			m := waitAgent(t, data, "master", 20*time.Second, func(a control.AgentInfo) bool {
				return a.State == control.StateRunning && a.PID != 0
			})
			// The environment the process was started with (the agent
			// took the two out of its own since: dropDaemonProcs).
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", m.PID))
			if err != nil {
				t.Fatal(err)
			}
			env := strings.Split(string(raw), "\x00")
			for _, kv := range tc.want {
				if !slices.Contains(env, kv) {
					t.Errorf("the master started without %s: %q", kv, env)
				}
			}
			for _, kv := range tc.not {
				if slices.Contains(env, kv) {
					t.Errorf("the master started with %s: %q", kv, env)
				}
			}
		})
	}
}
