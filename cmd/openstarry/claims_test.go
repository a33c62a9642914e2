package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestFleetClaims: three devices share the fleet topic of a real
// Mosquitto; 300 task ids are each sent twice, back to back, so that the
// two copies mostly reach two different devices at the same moment. Each
// task id runs once across the fleet: the claims drop the copy that reached
// another device (dead-lettered with the owner), the agent's own
// deduplication the copy that reached the same one. It prints the figures.
func TestFleetClaims(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	col := mqtttest.Collect(t, m.URL(), "observer-claims", false, "openstarry/+/agents/+/results", "openstarry/+/deadletter")
	devices := []string{"dev-1", "dev-2", "dev-3"}
	for _, dev := range devices {
		c := startChild(t, true, "run", "--agent", "master", "--device", dev, "--listen", "127.0.0.1:0",
			"--data", t.TempDir(), "--broker", m.URL(), "--fleet-workers") // echo is a worker template
		c.waitLog("subscribed to $share/openstarry/openstarry/fleet/tasks", 20*time.Second)
		c.waitLog("fleet: connected for the claims", 20*time.Second)
	}
	pub := mqttPublisher(t, m.URL())
	const n = 300
	start := time.Now()
	toks := make([]paho.Token, 0, 2*n)
	for i := range n {
		task := mqttTask(fmt.Sprintf("claim-%03d", i), fmt.Sprintf("task %d", i))
		for range 2 {
			toks = append(toks, pub.Publish(mqtt.FleetTopic("openstarry"), 1, false, task))
		}
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	// runs: task id → the distinct executions (device, tick) among the results.
	runs := func() map[string]map[string]bool {
		out := map[string]map[string]bool{}
		for _, msg := range col.Messages("openstarry/+/agents/+/results") {
			var r struct {
				TaskID    string `json:"task_id"`
				TickIndex uint64 `json:"tick_index"`
			}
			if json.Unmarshal(msg.Payload, &r) != nil {
				t.Fatalf("result %s", msg.Payload)
			}
			dev := strings.Split(msg.Topic, "/")[1]
			if out[r.TaskID] == nil {
				out[r.TaskID] = map[string]bool{}
			}
			out[r.TaskID][fmt.Sprintf("%s@%d", dev, r.TickIndex)] = true
		}
		return out
	}
	wait.For(t, 60*time.Second, "a result for each task id", func() bool { return len(runs()) == n })
	took := time.Since(start)
	// Then until nothing more arrives for a second: a late second run
	// would show here.
	last := -1
	wait.For(t, 30*time.Second, "the fleet to go quiet", func() bool {
		cur := len(col.Messages(""))
		if cur == last {
			return true
		}
		last = cur
		time.Sleep(time.Second)
		return false
	})
	twice, perDevice := 0, map[string]int{}
	for id, rs := range runs() {
		if len(rs) > 1 {
			twice++
			t.Errorf("task %s ran %d times: %v", id, len(rs), rs)
		}
		for k := range rs {
			perDevice[strings.Split(k, "@")[0]]++
		}
	}
	claimed := 0
	for _, msg := range col.Messages("openstarry/+/deadletter") {
		if strings.Contains(string(msg.Payload), `"code":"`+mqtt.CodeClaimedElsewhere+`"`) {
			claimed++
		}
	}
	fmt.Printf("fleet claims: %d devices, %d task ids sent twice: %d ran twice; %d second copies reached another device and were dropped by its claim; runs per device %v; %s\n",
		len(devices), n, twice, claimed, perDevice, took.Round(time.Millisecond))
	if claimed == 0 {
		t.Error("no second copy reached another device: the test did not exercise the claims")
	}
}
