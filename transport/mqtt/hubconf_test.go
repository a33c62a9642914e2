package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// hubConf returns packaging/mosquitto/hub.conf made runnable in a test:
// its listener on the test's port, its files in the test's directory.
func hubConf(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile("../../packaging/mosquitto/hub.conf")
	if err != nil {
		t.Fatal(err)
	}
	acl, err := os.ReadFile("../../packaging/mosquitto/openstarry.acl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "openstarry.acl"), acl, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	for _, r := range []struct{ re, with string }{
		{`(?m)^listener 1883 127\.0\.0\.1$`, "listener {{PORT}} 127.0.0.1"},
		{`(?m)^persistence_location .*$`, "persistence_location {{DIR}}/"},
		{`(?m)^password_file .*$`, "password_file " + filepath.Join(dir, "passwd")},
		{`(?m)^acl_file .*$`, "acl_file " + filepath.Join(dir, "openstarry.acl")},
		{`(?m)^log_dest syslog$`, "log_dest stderr"},
	} {
		re := regexp.MustCompile(r.re)
		if !re.MatchString(conf) {
			t.Fatalf("hub.conf has no line matching %s", r.re)
		}
		conf = re.ReplaceAllString(conf, r.with)
	}
	return conf
}

// TestMQTTHubConf runs Mosquitto with the shipped hub.conf and ACL: a
// device user reaches its own topics and the fleet, not another device's,
// and 1,500 tasks queued while its agent is offline all arrive — where
// Mosquitto's defaults silently keep 1,000.
func TestMQTTHubConf(t *testing.T) {
	dir := t.TempDir()
	mqtttest.PasswordFile(t, dir, map[string]string{"dev1": "dev1-pw", "dispatcher": "disp-pw"})
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Config: hubConf(t, dir)})

	login := func(c *mqtt.Config) { c.Username, c.Password = "dev1", "dev1-pw" }
	// Anonymous and wrong passwords are refused.
	for _, cfg := range []mqtt.Config{{}, {Username: "dev1", Password: "nope"}} {
		cfg.Broker, cfg.Device, cfg.Agent, cfg.Log = m.URL(), device, "a1", testLog(t)
		c, err := mqtt.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background(), nopRuntime{}); err == nil {
			t.Errorf("user %q connected", cfg.Username)
		}
		c.Close(context.Background())
	}

	dispatcher := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID("dispatcher").
		SetUsername("dispatcher").SetPassword("disp-pw").SetProtocolVersion(4))
	if tok := dispatcher.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("dispatcher login: %v\n%s", tok.Error(), m.Logs())
	}
	defer dispatcher.Disconnect(50)

	// The device's ACL: its own topics and the fleet reach it, another
	// device's do not (Mosquitto grants the subscription and filters on
	// delivery).
	got := make(chan string, 10)
	devc := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID("acl-probe").
		SetUsername("dev1").SetPassword("dev1-pw").SetProtocolVersion(4).
		SetDefaultPublishHandler(func(_ paho.Client, msg paho.Message) { got <- msg.Topic() }))
	if tok := devc.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("device login: %v\n%s", tok.Error(), m.Logs())
	}
	defer devc.Disconnect(50)
	tok := devc.SubscribeMultiple(map[string]byte{
		"openstarry/dev1/probe":                    1,
		"$share/openstarry/openstarry/fleet/tasks": 1,
		"openstarry/dev2/#":                        1,
	}, nil)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	for _, topic := range []string{"openstarry/dev2/agents/a1/tasks", "openstarry/dev1/probe", "openstarry/fleet/tasks"} {
		mqtttest.Publish(t, dispatcher, topic, []byte("x"))
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case topic := <-got:
			seen[topic] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("the device got only %v", seen)
		}
	}
	select {
	case topic := <-got:
		seen[topic] = true
	case <-time.After(300 * time.Millisecond):
	}
	if !seen["openstarry/dev1/probe"] || !seen["openstarry/fleet/tasks"] || seen["openstarry/dev2/agents/a1/tasks"] {
		t.Errorf("device dev1 received %v", seen)
	}
	devc.Unsubscribe("$share/openstarry/openstarry/fleet/tasks").WaitTimeout(5 * time.Second)

	// The agent's session exists, then it goes offline.
	a := startAgent(t, agentOpts{brokerURL: m.URL(), cfg: login})
	a.stop()
	const n = 1500
	toks := make([]paho.Token, 0, n)
	for i := range n {
		toks = append(toks, dispatcher.Publish("openstarry/dev1/agents/a1/tasks", 1, false, task(fmt.Sprintf("q%04d", i), i)))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("dispatch: %v", tok.Error())
		}
	}
	back := startAgent(t, agentOpts{brokerURL: m.URL(), dir: a.dir, cfg: login})
	wait.For(t, 60*time.Second, "all queued tasks", func() bool { return back.client.Stats().Accepted == n })
	if st := back.client.Stats(); st.Received != n {
		t.Errorf("received %d of %d", st.Received, n)
	}
}

// TestMQTTDefaultMosquittoDrops is the reason for hub.conf: with
// Mosquitto's default max_queued_messages, tasks queued for an offline
// agent beyond 1,000 vanish, although every publication was acknowledged.
func TestMQTTDefaultMosquittoDrops(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Config: strings.Join([]string{
		"listener {{PORT}} 127.0.0.1", "allow_anonymous true", "log_dest stderr",
	}, "\n")})
	a := startAgent(t, agentOpts{brokerURL: m.URL()})
	a.stop()
	pub := publisher(t, m.URL())
	for i := range 1500 {
		mqtttest.Publish(t, pub, a.client.Topics().Tasks, task(fmt.Sprintf("d%04d", i), i))
	}
	back := startAgent(t, agentOpts{brokerURL: m.URL(), dir: a.dir})
	wait.Settle(t, 2*time.Second, "Mosquitto would have delivered every task it kept by now")
	if got := back.client.Stats().Received; got >= 1500 {
		t.Fatalf("default Mosquitto delivered all %d; hub.conf's reason is gone", got)
	} else {
		t.Logf("default Mosquitto delivered %d of 1500 acknowledged tasks", got)
	}
}
