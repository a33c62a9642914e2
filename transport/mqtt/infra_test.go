package mqtt

import (
	"context"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
)

// TestInfraAgentArgs: the daemon hands its agents the broker it started
// (here a hub), the resolved device and the rest of mqtt.* as flags; only
// the master takes fleet tasks; the password travels in the environment.
func TestInfraAgentArgs(t *testing.T) {
	c := config.Default().MQTT
	c.Broker, c.Device, c.Username, c.Password = "tcp://127.0.0.1:1", "dev1", "u", "pw"
	m, err := NewInfra(InfraOptions{Config: c, Version: "test", Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil { // an unreachable hub is retried in the background
		t.Fatal(err)
	}
	defer m.Close()
	base := []string{"--broker", "tcp://127.0.0.1:1", "--device", "dev1", "--topic-prefix", "openstarry", "--fleet-group", "openstarry"}
	for _, tc := range []struct {
		role string
		args []string
	}{
		{"master", append(slices.Clone(base), "--mqtt-username", "u")},
		{"worker", append(slices.Clone(base), "--no-fleet", "--mqtt-username", "u")},
	} {
		args, env := m.AgentArgs("a1", tc.role)
		if !slices.Equal(args, tc.args) || !slices.Equal(env, []string{"OPENSTARRY_MQTT_PASSWORD=pw"}) {
			t.Errorf("%s: args %q env %q, want %q", tc.role, args, env, tc.args)
		}
	}

	off, err := NewInfra(InfraOptions{Config: config.MQTT{Disabled: true}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if args, env := off.AgentArgs("a1", "master"); !slices.Equal(args, []string{"--no-mqtt"}) || env != nil {
		t.Errorf("disabled: args %q env %q", args, env)
	}
}
