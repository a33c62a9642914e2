package mqtt_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// flakyGate fails its first fails claims, as a claim whose echo the
// broker did not send in time does, then gives every task to this device.
type flakyGate struct {
	fails int32
	calls atomic.Int32
}

func (g *flakyGate) Claim(ctx context.Context, taskID string) (string, bool, error) {
	if g.calls.Add(1) <= g.fails {
		return "", false, errors.New("fleet: the claim could not be made: the broker did not send the claim back")
	}
	return "dev", true, nil
}

// TestFleetClaimRetried: a fleet task whose claim fails is claimed again
// until it succeeds, and runs. It used to be left unacknowledged for the
// broker to deliver again, which a broker does not do on a live MQTT 3.1.1
// connection: the task never ran while the agent lived.
func TestFleetClaimRetried(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	gate := &flakyGate{fails: 2}
	a := startAgent(t, agentOpts{brokerURL: m.URL(), cfg: func(c *mqtt.Config) { c.FleetGate = gate }})
	tp := a.client.Topics()
	col := mqtttest.Collect(t, m.URL(), "observer-gate", true, tp.Results)
	pub := publisher(t, m.URL())
	mqtttest.Publish(t, pub, tp.Fleet, task("fleet-1", "after two failed claims"))
	wait.For(t, 30*time.Second, "the fleet task's result", func() bool {
		return len(mqtttest.Results(t, col, tp.Results)["fleet-1"]) > 0
	})
	if n := gate.calls.Load(); n != 3 {
		t.Errorf("%d claims, want 3", n)
	}
}
