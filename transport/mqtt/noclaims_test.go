package mqtt

import (
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// withoutClaims runs f as in a binary that does not link transport/fleet.
func withoutClaims(t *testing.T, f func()) {
	t.Helper()
	defer plugin.Without(fleetClaims)()
	f()
}

// TestNoClaimsRefused: an agent that would subscribe to the fleet topic in
// a binary without fleet claims is refused when its transport is opened,
// saying what to do, instead of running every fleet task it receives; one
// that takes no fleet tasks (mqtt.no_fleet, a worker) starts as before.
func TestNoClaimsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noFleet bool
		role    string
		refused bool
	}{
		{"master", false, design.RoleMaster, true},
		{"no_fleet", true, design.RoleMaster, false},
		{"worker", false, design.RoleWorker, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			c.MQTT.Broker = "tcp://127.0.0.1:1" // a hub: no embedded broker, and nothing is dialled
			c.MQTT.Device = "d1"
			c.MQTT.NoFleet = tc.noFleet
			env := plugin.TransportEnv{AgentID: "a1", DataDir: t.TempDir(), Role: tc.role, Log: zerolog.Nop()}
			withoutClaims(t, func() {
				tr, err := openTransport(c, env)
				if tc.refused {
					if !errors.Is(err, ErrNoClaims) || !strings.Contains(err.Error(), "transport/fleet") || !strings.Contains(err.Error(), "mqtt.no_fleet") {
						t.Fatalf("openTransport = %v, want ErrNoClaims naming transport/fleet and mqtt.no_fleet", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("openTransport without fleet tasks: %v", err)
				}
				if tr.(*transport).claims != nil {
					t.Fatal("claims made for an agent without fleet tasks")
				}
			})
		})
	}
}

// TestRegisterClaimsTwice: a second registration, or a nil one, is a
// programming error, not a silent replacement.
func TestRegisterClaimsTwice(t *testing.T) {
	f := func(Config) (Claims, error) { return nil, nil }
	for _, tc := range []struct {
		name  string
		first func(Config) (Claims, error)
		again func(Config) (Claims, error)
	}{
		{"twice", f, f},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withoutClaims(t, func() {
				if tc.first != nil {
					RegisterClaims(tc.first)
				}
				defer func() {
					if recover() == nil {
						t.Error("no panic")
					}
				}()
				RegisterClaims(tc.again)
			})
		})
	}
}
