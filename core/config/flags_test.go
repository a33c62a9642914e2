package config

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeyFlags: flag names are unique, and every key handed to the agents
// has a flag to arrive by (or, a secret, its environment variable).
func TestKeyFlags(t *testing.T) {
	seen := map[string]string{}
	for _, k := range Keys {
		if k.Flag == "" {
			if k.Agent {
				t.Errorf("%s is handed to the agents but has no flag", k.Name)
			}
			continue
		}
		if other, dup := seen[k.Flag]; dup {
			t.Errorf("--%s is the flag of both %s and %s", k.Flag, other, k.Name)
		}
		seen[k.Flag] = k.Name
	}
}

// TestVar: flags generated from the table set the configuration; a list
// flag repeated appends, its first use replaces the default.
func TestVar(t *testing.T) {
	c := Default()
	c.Design.TrustedKeys = []string{"from-env"}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	for _, k := range FlagKeys("data", "design", "mqtt") {
		fs.Var(c.Var(k), k.Flag, k.Doc)
	}
	err := fs.Parse([]string{"--data", "/d", "--design-timeout", "2s", "--design-retries", "0", "--no-fleet",
		"--trusted-key", "a,b", "--trusted-key", "c", "--broker", "tcp://hub:1883"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Data != "/d" || c.Design.Timeout != 2*time.Second || c.Design.Retries != 0 || !c.MQTT.NoFleet ||
		c.MQTT.Broker != "tcp://hub:1883" || !slices.Equal(c.Design.TrustedKeys, []string{"a", "b", "c"}) {
		t.Fatalf("parsed into %+v %+v %+v", c.Data, c.Design, c.MQTT)
	}
	if err := fs.Parse([]string{"--design-retries", "many"}); err == nil {
		t.Fatal("a bad integer was accepted")
	}
	if fs.Lookup("log-level") != nil || fs.Lookup("broker-listen") == nil {
		t.Fatal("FlagKeys picked the wrong sections")
	}
}

// TestAgentArgs: the daemon hands mqtt.* to its agents as their flags,
// a secret only through the environment.
func TestAgentArgs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mqtt      MQTT
		args, env []string
	}{
		{"disabled", MQTT{Disabled: true}, []string{"--no-mqtt"}, nil},
		{"hub", MQTT{Broker: "ssl://hub:8883", BrokerListen: "127.0.0.1:1883", BrokerUsers: "/u.json", Device: "d1",
			TopicPrefix: "p", FleetGroup: "g", NoFleet: true, Username: "u", Password: "s3cret", CA: "/ca.pem",
			TelemetryInterval: time.Minute},
			[]string{"--broker", "ssl://hub:8883", "--device", "d1", "--topic-prefix", "p", "--fleet-group", "g",
				"--no-fleet", "--mqtt-username", "u", "--mqtt-ca", "/ca.pem"},
			[]string{"OPENSTARRY_MQTT_PASSWORD=s3cret"}},
		{"device named false", MQTT{Broker: "tcp://b:1", Device: "false"}, []string{"--broker", "tcp://b:1", "--device", "false"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Data: "/not/handed", MQTT: tc.mqtt}
			args, env := c.AgentArgs()
			if !slices.Equal(args, tc.args) || !slices.Equal(env, tc.env) {
				t.Fatalf("args %q env %q, want %q %q", args, env, tc.args, tc.env)
			}
		})
	}
}

// TestConfigurationDocFlags: docs/configuration.md names every key's flag.
func TestConfigurationDocFlags(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(data)), " ")
	for _, k := range Keys {
		if k.Flag != "" && !strings.Contains(text, "`--"+k.Flag+"`") {
			t.Errorf("docs/configuration.md does not name --%s, the flag of %s", k.Flag, k.Name)
		}
	}
}
