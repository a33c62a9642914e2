package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/transport/fleet"
)

// TestPrintFleet: fleet status's UP column is the time since the device's
// daemon started, now, not the uptime its last telemetry reported (a device
// up 20 s whose telemetry went out 1 s after its start showed "1s"); a
// device that stopped cleanly shows no UP and no agent running, one that
// lost its hub its agents at the last report.
func TestPrintFleet(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	tel := func(startedAgo, sentAgo time.Duration) *fleet.Telemetry {
		return &fleet.Telemetry{Version: "1.4.0", Time: now.Add(-sentAgo), Started: now.Add(-startedAgo),
			UptimeSeconds: int64((startedAgo - sentAgo) / time.Second), StoreBytes: 1 << 20, DiskFreeBytes: 2 << 30,
			Agents: []fleet.AgentTelemetry{{ID: "master", Role: "master", State: "running"}}}
	}
	noStarted := tel(20*time.Second, 19*time.Second)
	noStarted.Started = time.Time{}
	for _, tc := range []struct {
		name string
		view fleet.DeviceView
		want string // the device's line, spaces collapsed
	}{
		{"online", fleet.DeviceView{Device: "d", State: "online", Telemetry: tel(20*time.Second, 19*time.Second)},
			"d online 1.4.0 20s 1/1 running 0 1.0 MiB 2.0 GiB 19s ago"},
		{"online, older telemetry without started", fleet.DeviceView{Device: "d", State: "online", Telemetry: noStarted},
			"d online 1.4.0 20s 1/1 running 0 1.0 MiB 2.0 GiB 19s ago"},
		{"stopped", fleet.DeviceView{Device: "d", State: "offline", Reason: "stopped", Telemetry: tel(time.Hour, 5*time.Second)},
			"d offline 1.4.0 - 0/1 running 0 1.0 MiB 2.0 GiB 5s ago"},
		{"lost", fleet.DeviceView{Device: "d", State: "offline", Reason: "connection lost", Telemetry: tel(time.Hour, 5*time.Second)},
			"d offline 1.4.0 - 1/1 at last report 0 1.0 MiB 2.0 GiB 5s ago"},
		{"no telemetry", fleet.DeviceView{Device: "d", State: "online"}, "d online - - - - - - -"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printFleet(&b, []fleet.DeviceView{tc.view}, now)
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			got := regexp.MustCompile(` +`).ReplaceAllString(lines[len(lines)-1], " ")
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
