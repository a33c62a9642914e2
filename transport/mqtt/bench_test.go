package mqtt_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// BenchmarkMQTTIngress measures, on one broker and in one run:
//
//   - tasks/s: 1 KiB tasks from one publisher made durable and acknowledged
//     by an agent (Runtime on a real bbolt store, fsync per save, group
//     commit) through this package's ingress;
//   - broker-msgs/s: the same publisher and payloads to a bare paho
//     subscriber that acknowledges each message by hand and does nothing
//     else — the broker's own QoS 1 loopback throughput, no persistence;
//   - ratio: tasks/s over broker-msgs/s.
//
// Run: go test -run '^$' -bench MQTTIngress -benchtime 5000x ./transport/mqtt/
func BenchmarkMQTTIngress(b *testing.B) {
	b.Run("mosquitto", func(b *testing.B) {
		m := mqtttest.StartMosquitto(b, mqtttest.Options{NoPersistence: true})
		benchIngress(b, m.URL())
	})
	b.Run("embedded", func(b *testing.B) {
		br, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(b).Level(3)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Close() })
		benchIngress(b, br.URL())
	})
}

var benchRun atomic.Int64

func benchIngress(b *testing.B, url string) {
	n := max(b.N, 500)
	run := benchRun.Add(1)
	payload := func(prefix string, i int) []byte {
		head := fmt.Sprintf(`{"task_id":"%s-%06d","type":"bench","input":"`, prefix, i)
		return []byte(head + strings.Repeat("x", 1024-len(head)-2) + `"}`)
	}
	pub := publisher(b, url)
	publishAll := func(topic, prefix string) {
		toks := make([]paho.Token, n)
		for i := range n {
			toks[i] = pub.Publish(topic, 1, false, payload(prefix, i))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
				b.Fatalf("publish: %v", tok.Error())
			}
		}
	}

	// The broker alone: publisher → subscriber, manual ack, nothing else.
	var got atomic.Int64
	allIn := make(chan struct{})
	topic := fmt.Sprintf("bench/%d/loopback", run)
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("bench-sub-%d", run)).
		SetCleanSession(true).SetProtocolVersion(4).SetAutoAckDisabled(true).SetOrderMatters(true))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	defer sub.Disconnect(50)
	if tok := sub.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		m.Ack()
		if got.Add(1) == int64(n) {
			close(allIn)
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}

	b.ResetTimer()
	t0 := time.Now()
	publishAll(topic, "loop")
	<-allIn
	loopback := float64(n) / time.Since(t0).Seconds()

	// The agent: ingress made durable on bbolt.
	b.StopTimer()
	var saves atomic.Int64
	a := startAgent(b, agentOpts{id: fmt.Sprintf("bench-%d", run), brokerURL: url, maxQueue: n + 100,
		cfg:       func(c *mqtt.Config) { c.NoFleet = true; c.Log = c.Log.Level(3) },
		afterSave: func(*agent.Snapshot) { saves.Add(1) }})
	saves.Store(0)
	b.StartTimer()
	t1 := time.Now()
	publishAll(a.client.Topics().Tasks, "task")
	for deadline := time.Now().Add(60 * time.Second); a.client.Stats().Accepted < uint64(n); {
		if time.Now().After(deadline) {
			b.Fatalf("after 60s: %+v of %d tasks", a.client.Stats(), n)
		}
		time.Sleep(time.Millisecond)
	}
	ingress := float64(n) / time.Since(t1).Seconds()
	b.StopTimer()
	b.ReportMetric(float64(saves.Load()), "saves")

	b.ReportMetric(ingress, "tasks/s")
	b.ReportMetric(loopback, "broker-msgs/s")
	b.ReportMetric(ingress/loopback, "ratio")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d tasks of 1 KiB: ingress %.0f tasks/s, broker loopback %.0f msgs/s, ratio %.2f", n, ingress, loopback, ingress/loopback)
}
