package mqtt_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestMQTTTasksRunInPublishedOrder: a burst of tasks from one publisher,
// all in flight at once, is queued and run in the order it was published
// (each task's tick_index follows the previous one's), on Mosquitto and on
// the embedded broker. Before the client handed tasks to the runtime in
// order (one goroutine per message, each waiting for its save), tasks that
// arrived within one commit window were queued in whatever order their
// goroutines reached the runtime.
func TestMQTTTasksRunInPublishedOrder(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		const n = 300
		a := startAgent(t, agentOpts{brokerURL: url, maxQueue: n + 10})
		col := mqtttest.Collect(t, url, "order-observer", true, a.client.Topics().Results)
		pub := publisher(t, url)
		toks := make([]paho.Token, n)
		for i := range n {
			toks[i] = pub.Publish(a.client.Topics().Tasks, 1, false, task(fmt.Sprintf("o%03d", i), "x"))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
		wait.Until(t, 60*time.Second, "every result", func() error {
			if got := len(col.Messages(a.client.Topics().Results)); got < n {
				return fmt.Errorf("%d of %d results", got, n)
			}
			return nil
		})
		tick := map[string]uint64{}
		for _, m := range col.Messages(a.client.Topics().Results) {
			var r mqtttest.Result
			if err := json.Unmarshal(m.Payload, &r); err != nil {
				t.Fatal(err)
			}
			tick[r.TaskID] = r.TickIndex
		}
		for i := 1; i < n; i++ {
			prev, cur := fmt.Sprintf("o%03d", i-1), fmt.Sprintf("o%03d", i)
			if tick[cur] <= tick[prev] {
				t.Fatalf("task %s ran at tick %d, before %s published earlier (tick %d)", cur, tick[cur], prev, tick[prev])
			}
		}
	})
}
