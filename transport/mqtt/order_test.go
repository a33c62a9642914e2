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

// TestMQTTFullQueueWaitsUnacknowledged: tasks that find the agent's queue
// full stay unacknowledged and are handed to it again as it drains, with
// the same backoff as before SubmitAsync: every task runs once and is
// answered once, none is dead-lettered or lost.
func TestMQTTFullQueueWaitsUnacknowledged(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		const n = 8
		a := startAgent(t, agentOpts{brokerURL: url, maxQueue: 2})
		col := mqtttest.Collect(t, url, "full-observer", true, a.client.Topics().Results)
		pub := publisher(t, url)
		for i := range n {
			mqtttest.Publish(t, pub, a.client.Topics().Tasks, sleepTask(fmt.Sprintf("f%d", i), 100))
		}
		wait.Until(t, 60*time.Second, "every result", func() error {
			if got := len(col.Messages(a.client.Topics().Results)); got < n {
				return fmt.Errorf("%d of %d results (%+v)", got, n, a.client.Stats())
			}
			return nil
		})
		res := mqtttest.Results(t, col, a.client.Topics().Results)
		for i := range n {
			rs := res[fmt.Sprintf("f%d", i)]
			if len(rs) != 1 || rs[0].Status != "done" {
				t.Errorf("task f%d: results %+v, want one done", i, rs)
			}
		}
		if st := a.client.Stats(); st.Accepted != n || st.DeadLettered != 0 || st.Duplicates != 0 {
			t.Errorf("stats %+v: want %d accepted, none dead-lettered or duplicate", st, n)
		}
	})
}
