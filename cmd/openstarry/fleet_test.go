//go:build unix

package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestFleetCommands: two daemons on one Mosquitto as devices dev-a and dev-b
// trust the fleet key. A signed agent.restart restarts dev-a's master and is
// answered; logs.tail and config.get answer; an unsigned command, one signed
// by another key, one for another device, an expired one and a replayed one
// are dead-lettered with their reason and never answered; fleet status lists
// both devices from their retained telemetry.
func TestFleetCommands(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	keys := t.TempDir()
	if out, code := runCLI(t, "templates", "keygen", "--out", filepath.Join(keys, "fleet")); code != 0 {
		t.Fatalf("keygen: %s", out)
	}
	if out, code := runCLI(t, "templates", "keygen", "--out", filepath.Join(keys, "other")); code != 0 {
		t.Fatalf("keygen: %s", out)
	}
	pubFile, keyFile := filepath.Join(keys, "fleet.pub"), filepath.Join(keys, "fleet.key")
	var daemons = map[string]*child{}
	var datas = map[string]string{}
	for _, dev := range []string{"dev-a", "dev-b"} {
		data := dataDir(t)
		datas[dev] = data
		daemons[dev] = startDaemon(t, daemonConfig(t, data, "design:\n  trusted_keys: ["+pubFile+"]\n"+
			"mqtt:\n  broker: "+m.URL()+"\n  device: "+dev+"\n  telemetry_interval: 1s\n"))
		daemons[dev].waitLog("mqtt: connected to "+m.URL(), 10*time.Second)
	}
	dl := mqtttest.Collect(t, m.URL(), "fleet-test-dl", true, "openstarry/+/deadletter", "openstarry/+/commands/+/reply")

	// A signed restart.
	before, _ := agentInfo(daemonStatus(t, datas["dev-a"]), "master")
	out, code := runCLI(t, "fleet", "command", "--broker", m.URL(), "--device", "dev-a", "--key", keyFile, "--agent", "master", "agent.restart")
	if code != 0 || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, `"id":"c-`) {
		t.Fatalf("agent.restart: %d\n%s", code, out)
	}
	waitAgent(t, datas["dev-a"], "master", 20*time.Second, func(a control.AgentInfo) bool {
		return a.State == control.StateRunning && a.PID != before.PID
	})
	out, code = runCLI(t, "fleet", "command", "--broker", m.URL(), "--device", "dev-b", "--key", keyFile, "--lines", "5", "logs.tail")
	if code != 0 || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, `phase 4/4`) && !strings.Contains(out, `fleet: command accepted`) {
		t.Fatalf("logs.tail: %d\n%s", code, out)
	}
	out, code = runCLI(t, "fleet", "command", "--broker", m.URL(), "--device", "dev-b", "--key", keyFile, "config.get")
	if code != 0 || !strings.Contains(out, `"mqtt.device":"dev-b"`) || !strings.Contains(out, `"mqtt.password":""`) {
		t.Fatalf("config.get: %d\n%s", code, out)
	}
	out, code = runCLI(t, "fleet", "command", "--broker", m.URL(), "--device", "dev-a", "--key", keyFile, "--agent", "nosuch", "agent.restart")
	if code != 1 || !strings.Contains(out, `"ok":false`) {
		t.Fatalf("restart of an unknown agent: %d\n%s", code, out)
	}

	// Refusals: each goes to the dead letter topic with its code.
	priv, err := design.ReadPrivateKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	other, err := design.ReadPrivateKeyFile(filepath.Join(keys, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: m.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(10)
	now := time.Now()
	cmd := func(id, dev string) fleet.Command {
		return fleet.Command{ID: id, Name: "status", Device: dev, IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	signed := func(k ed25519.PrivateKey, c fleet.Command) []byte {
		b, err := fleet.Sign(k, c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unsigned, _ := json.Marshal(fleet.Envelope{Command: json.RawMessage(`{"id":"u1","name":"status","device":"dev-a"}`)})
	expired := cmd("x1", "dev-a")
	expired.ExpiresAt = now.Add(-time.Second)
	good := signed(priv, cmd("r1", "dev-a"))
	for _, p := range []struct {
		payload []byte
		code    string
	}{
		{unsigned, fleet.CodeUnsigned},
		{signed(other, cmd("o1", "dev-a")), fleet.CodeUnsigned},
		{signed(priv, cmd("w1", "dev-b")), fleet.CodeWrongDev},
		{signed(priv, expired), fleet.CodeExpired},
		{[]byte("not json"), fleet.CodeBadCommand},
		{good, ""},                 // obeyed
		{good, fleet.CodeReplayed}, // the same envelope again
	} {
		mqtttest.Publish(t, pc, fleet.CommandTopic("openstarry", "dev-a", "status"), p.payload)
	}
	// The reply and the dead letters travel separately: wait for both.
	replies := func() int {
		n := 0
		for _, msg := range dl.Messages("openstarry/dev-a/commands/status/reply") {
			var r fleet.Reply
			_ = json.Unmarshal(msg.Payload, &r)
			if r.ID == "r1" {
				n++
			}
		}
		return n
	}
	wait.For(t, 20*time.Second, "five refusals, a replay and a reply", func() bool {
		return len(dl.Messages("openstarry/dev-a/deadletter")) >= 6 && replies() >= 1
	})
	codes := map[string]int{}
	for _, msg := range dl.Messages("openstarry/dev-a/deadletter") {
		var d struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(msg.Payload, &d)
		codes[d.Code]++
	}
	want := map[string]int{fleet.CodeUnsigned: 2, fleet.CodeWrongDev: 1, fleet.CodeExpired: 1, fleet.CodeBadCommand: 1, fleet.CodeReplayed: 1}
	for c, n := range want {
		if codes[c] != n {
			t.Fatalf("dead letters by code %v, want %v", codes, want)
		}
	}
	wait.Settle(t, 500*time.Millisecond, "a second reply, to the replay, would be here by now")
	if n := replies(); n != 1 {
		t.Fatalf("%d replies to the obeyed command, want 1", n)
	}

	// The replay is refused after a restart too: the nonce is on disk.
	if !strings.Contains(readFileString(t, filepath.Join(datas["dev-a"], "fleet-nonces.json")), `"r1"`) {
		t.Fatal("the obeyed command's id is not recorded")
	}

	// fleet status from the retained telemetry.
	wait.For(t, 20*time.Second, "fleet status lists both devices", func() bool {
		out, code = runCLI(t, "fleet", "status", "--broker", m.URL(), "--wait", "500ms")
		return code == 0 && strings.Contains(out, "dev-a") && strings.Contains(out, "dev-b") && strings.Count(out, "1/1 running") == 2
	})
	if !strings.Contains(out, "DEVICE") || !strings.Contains(out, "online") {
		t.Fatalf("fleet status:\n%s", out)
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
