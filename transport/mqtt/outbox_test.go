package mqtt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// TestResultsPublishedWithoutTheTicker hands the client far more results
// than its publish window at once, five times. The publish loop must settle
// every PUBACK that arrived and go on with the next window at once, never
// wait for its periodic check (an hour here, so that a loop that waits for
// it fails the test): neither when every PUBACK of a window arrived before
// the loop settled it (no token is left to wake it), nor by settling only
// part of what arrived.
func TestResultsPublishedWithoutTheTicker(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(t).Level(3)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	a := startAgent(t, agentOpts{brokerURL: b.URL(), cfg: func(c *mqtt.Config) { c.NoFleet = true },
		beforeStart: func(c *mqtt.Client) { mqtt.SetCheckEvery(c, time.Hour) }})
	const n = 5000 // about twenty windows
	for round := range 5 {
		before := a.client.Stats().Published
		results := make([]agent.Result, n)
		for i := range results {
			seq := uint64(1_000_000 + round*n + i) // above the runtime's own
			results[i] = agent.Result{Seq: seq, TaskID: fmt.Sprintf("r%d-%d", round, i), AgentID: a.id,
				Status: agent.ResultDone}
		}
		a.client.Deliver(results)
		wait.For(t, 60*time.Second, fmt.Sprintf("round %d: %d results published", round, n), func() bool {
			return a.client.Stats().Published-before == n
		})
	}
}
