package mqtt_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestMQTTRetainedBadMessage: a retained bad message on the task topic is
// dead-lettered once and its retained copy cleared; when the broker hands
// it again after a restart (a hub that kept it), it is not dead-lettered a
// second time, because its digest is remembered in the agent's directory.
func TestMQTTRetainedBadMessage(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		dir := t.TempDir()
		tp := mqtt.TopicsFor(mqtt.DefaultTopicPrefix, device, "a1", mqtt.DefaultFleetGroup)
		col := mqtttest.Collect(t, url, "observer", true, tp.DeadLetter)
		pub := publisher(t, url)
		bad := []byte(`{"task_id": "ret", "input": `)
		publishRetained := func() {
			tok := pub.Publish(tp.Tasks, 1, true, bad)
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("publish retained: %v", tok.Error())
			}
		}
		n := 0
		retained := func() bool {
			n++
			c := mqtttest.Collect(t, url, fmt.Sprintf("peek-%d", n), true, tp.Tasks)
			defer c.Client.Disconnect(0)
			// A retained message comes right after the subscription: none
			// within 300 ms means the broker holds none.
			return wait.Poll(300*time.Millisecond, func() error {
				for _, m := range c.Messages(tp.Tasks) {
					if m.Retained && len(m.Payload) > 0 {
						return nil
					}
				}
				return errors.New("no retained message")
			}) == nil
		}
		publishRetained()
		if !retained() {
			t.Fatal("the broker does not hold the retained message")
		}
		opts := agentOpts{brokerURL: url, dir: dir, cfg: func(c *mqtt.Config) { c.StateDir = dir }}
		a := startAgent(t, opts)
		wait.For(t, 10*time.Second, "one dead letter", func() bool { return len(col.Messages(tp.DeadLetter)) == 1 })
		wait.For(t, 10*time.Second, "the retained copy cleared", func() bool { return !retained() })
		fi, err := os.Stat(filepath.Join(dir, mqtt.RejectedFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the digest is not remembered privately: %v %v", fi, err)
		}
		if st := a.client.Stats(); st.DeadLettered != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestMQTTRetainedBadMessageRemembered: when the broker refuses to clear
// the retained copy (an ACL that lets the device read its task topic but
// not write it), the message comes again at every start and is
// dead-lettered only the first time: its digest is remembered in the
// agent's directory.
func TestMQTTRetainedBadMessageRemembered(t *testing.T) {
	bdir := t.TempDir()
	pw := mqtttest.PasswordFile(t, bdir, map[string]string{"dev1": "dev-pw", "hub": "hub-pw"})
	tp := mqtt.TopicsFor(mqtt.DefaultTopicPrefix, device, "a1", mqtt.DefaultFleetGroup)
	acl := filepath.Join(bdir, "acl")
	if err := os.WriteFile(acl, []byte("user hub\ntopic readwrite #\n\nuser dev1\n"+
		"topic read "+tp.Tasks+"\ntopic write "+tp.Results+"\ntopic write "+tp.Progress+"\n"+
		"topic write "+tp.DeadLetter+"\ntopic readwrite "+tp.Status+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{PasswordFile: pw, Extra: []string{"acl_file " + acl}})
	url := m.URL()
	hub := func(id string) *mqtttest.Collector {
		return mqtttest.CollectAs(t, url, id, "hub", "hub-pw", true, tp.DeadLetter)
	}
	col := hub("observer")
	tok := col.Client.Publish(tp.Tasks, 1, true, []byte(`not a task`))
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish retained: %v", tok.Error())
	}
	dir := t.TempDir()
	opts := agentOpts{brokerURL: url, dir: dir, cfg: func(c *mqtt.Config) {
		c.StateDir, c.Username, c.Password, c.NoFleet = dir, "dev1", "dev-pw", true
	}}
	for run := 1; run <= 3; run++ {
		a := startAgent(t, opts)
		wait.For(t, 10*time.Second, "the retained message handed to the agent", func() bool { return a.client.Stats().Received >= 1 })
		wait.Settle(t, 300*time.Millisecond, "a second dead letter would be out by now")
		a.stop()
		if got := len(col.Messages(tp.DeadLetter)); got != 1 {
			t.Fatalf("run %d: %d dead letters for one retained message, want 1", run, got)
		}
	}
}
