//go:build unix

package mqtt_test

import (
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestMQTTKeepAliveDeadBroker: a broker that stops answering (Mosquitto
// SIGSTOPped: its socket stays open, nothing comes back) is taken for dead
// after the keep-alive and the ping timeout, and the client connects again
// once it answers; a task then goes through. Without the client's own
// keep-alive check it would sit on the silent connection for good.
func TestMQTTKeepAliveDeadBroker(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	logs := &logbuf.Buffer{}
	a := startAgent(t, agentOpts{brokerURL: m.URL(), cfg: func(c *mqtt.Config) {
		c.KeepAlive = time.Second
		c.Log = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	}})
	pid := m.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	wait.For(t, 60*time.Second, "the silent broker taken for dead", func() bool {
		return strings.Contains(logs.String(), "no answer from the broker within the keep-alive")
	})
	resume()
	wait.For(t, 60*time.Second, "the second connection", func() bool { return strings.Contains(logs.String(), `"connection":2`) })
	tp := a.client.Topics()
	col := mqtttest.Collect(t, m.URL(), "observer-keepalive", true, tp.Results)
	pub := publisher(t, m.URL())
	mqtttest.Publish(t, pub, tp.Tasks, task("ka-1", "x"))
	wait.For(t, 30*time.Second, "the task's result", func() bool {
		return len(mqtttest.Results(t, col, tp.Results)["ka-1"]) > 0
	})
	if st := a.client.Stats(); st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}
