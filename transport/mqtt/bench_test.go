package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// BenchmarkMQTTIngress measures, on one broker and in one run, with one
// publisher of 1 KiB tasks (QoS 1, every PUBACK awaited):
//
//   - results/s: tasks run to their end, counted when the agent (Runtime
//     on a real bbolt store, fsync per save, group commit, the echo brain)
//     has published their result (QoS 1, acknowledged by the broker):
//     from the first publish of a round to the last result published;
//   - tasks/s: the same tasks counted when the agent has made them durable
//     and acknowledged them (ingress alone, the results still running);
//   - broker-msgs/s: the same publisher and payloads to a bare paho
//     subscriber on the same kind of connection as the agent's (read
//     buffer), acknowledging each message by hand and doing nothing else:
//     the broker's own QoS 1 loopback throughput, no persistence;
//   - stock-msgs/s: the same with paho's own connection (no read buffer);
//   - relay-msgs/s: the same publisher and payloads to a bare paho client
//     that answers each message with a 1 KiB message of its own (QoS 1) on
//     another topic, counted when those reach a bare subscriber: a task in
//     and a result out through the broker and nothing else, what results/s
//     could reach with an agent that did no work and kept nothing;
//   - ratio: results/s over broker-msgs/s (target ≥ 0.8); ack-ratio:
//     tasks/s over broker-msgs/s; stock-ratio: results/s over stock-msgs/s;
//     relay-ratio: results/s over relay-msgs/s;
//   - cpu-us/task and relay-cpu-us/msg: the processor time of this process
//     (publisher, subscribers, relay, agent, and the embedded broker) and of
//     the Mosquitto, per task of the agent's rounds and per message of the
//     relay's (Linux; 0 elsewhere); cpu-relay-ratio: relay-cpu-us/msg over
//     cpu-us/task. Both cases are bound by the processor: on a machine
//     that others share, the rates move with their load while these stay.
//
// The three are measured in alternating rounds, and each figure is the
// median of its rounds, so that a drift of the machine's speed during the
// run hits all three alike. A round ends when the agent has published
// every result.
//
// Run: go test -run '^$' -bench MQTTIngress -benchtime 20000x ./transport/mqtt/
func BenchmarkMQTTIngress(b *testing.B) {
	b.Run("mosquitto", func(b *testing.B) {
		m := mqtttest.StartMosquitto(b, mqtttest.Options{NoPersistence: true, Extra: []string{"set_tcp_nodelay true"}})
		benchIngress(b, m.URL(), m.PID())
	})
	b.Run("embedded", func(b *testing.B) {
		br, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(b).Level(3)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Close() })
		benchIngress(b, br.URL(), 0)
	})
}

// procCPU is the processor time process pid (0: this one) has used, from
// /proc/PID/task/*/schedstat; 0 where there is no /proc.
func procCPU(pid int) time.Duration {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	tasks, _ := filepath.Glob(dir + "/*/schedstat")
	var ns int64
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns += n
		}
	}
	return time.Duration(ns)
}

var benchRun atomic.Int64

const ingressRounds = 5

func benchIngress(b *testing.B, url string, brokerPID int) {
	cpu := func() time.Duration {
		t := procCPU(0)
		if brokerPID != 0 {
			t += procCPU(brokerPID)
		}
		return t
	}
	n := max(b.N, 2000) // tasks per round: shorter rounds measure start-up
	run := benchRun.Add(1)
	payload := func(prefix string, i int) []byte {
		head := fmt.Sprintf(`{"task_id":"%s-%06d","type":"bench","input":"`, prefix, i)
		return []byte(head + strings.Repeat("x", 1024-len(head)-2) + `"}`)
	}
	pub := publisher(b, url)
	// publishAll publishes n tasks and returns when the broker has
	// acknowledged all of them.
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

	// Bare subscribers: manual ack, nothing else.
	var got atomic.Int64
	var allIn chan struct{}
	bare := func(name string, buffered bool) string {
		topic := fmt.Sprintf("bench/%d/%s", run, name)
		o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("bench-%s-%d", name, run)).
			SetCleanSession(true).SetProtocolVersion(4).SetAutoAckDisabled(true).SetOrderMatters(true)
		if buffered {
			o.SetCustomOpenConnectionFn(mqtt.Opener(nil))
		}
		sub := paho.NewClient(o)
		if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatal(tok.Error())
		}
		b.Cleanup(func() { sub.Disconnect(50) })
		if tok := sub.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
			m.Ack()
			if got.Add(1) == int64(n) {
				close(allIn)
			}
		}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatal(tok.Error())
		}
		return topic
	}
	var loopCPU time.Duration // of the last loopback
	loopback := func(topic string) float64 {
		got.Store(0)
		allIn = make(chan struct{})
		c0, t0 := cpu(), time.Now()
		publishAll(topic, "loop")
		<-allIn
		loopCPU = cpu() - c0
		return float64(n) / time.Since(t0).Seconds()
	}
	bufTopic, stockTopic := bare("buffered", true), bare("stock", false)

	// The relay: answers every message on relayIn with one on the
	// buffered subscriber's topic, which counts them.
	relayIn := fmt.Sprintf("bench/%d/relay", run)
	answer := payload("result", 0)
	ro := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("bench-relay-%d", run)).
		SetCleanSession(true).SetProtocolVersion(4).SetAutoAckDisabled(true).SetOrderMatters(true).
		SetCustomOpenConnectionFn(mqtt.Opener(nil)).SetMaxResumePubInFlight(n)
	relay := paho.NewClient(ro)
	if tok := relay.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	b.Cleanup(func() { relay.Disconnect(50) })
	if tok := relay.Subscribe(relayIn, 1, func(c paho.Client, m paho.Message) {
		c.Publish(bufTopic, 1, false, answer) // asynchronous: the subscriber counts it
		m.Ack()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}

	var saves atomic.Int64
	a := startAgent(b, agentOpts{id: fmt.Sprintf("bench-%d", run), brokerURL: url, maxQueue: n + 100,
		cfg:       func(c *mqtt.Config) { c.NoFleet = true; c.Log = c.Log.Level(3) },
		afterSave: func(*agent.Snapshot) { saves.Add(1) }})
	var ingressSaves int64
	var ingressCPU time.Duration // of the last round
	ingress := func(round int) (acked, results float64) {
		s0 := saves.Load()
		before := a.client.Stats()
		c0, t1 := cpu(), time.Now()
		publishAll(a.client.Topics().Tasks, fmt.Sprintf("task%d", round))
		want := before.Accepted + uint64(n)
		for deadline := time.Now().Add(60 * time.Second); a.client.Stats().Accepted < want; {
			if time.Now().After(deadline) {
				b.Fatalf("after 60s: %+v, want %d accepted", a.client.Stats(), want)
			}
			time.Sleep(time.Millisecond)
		}
		acked = float64(n) / time.Since(t1).Seconds()
		// Published counts results the broker acknowledged.
		for deadline := time.Now().Add(5 * time.Minute); a.client.Stats().Published < want; {
			if time.Now().After(deadline) {
				b.Fatalf("after 5m: %+v, want %d published", a.client.Stats(), want)
			}
			time.Sleep(time.Millisecond)
		}
		results = float64(n) / time.Since(t1).Seconds()
		ingressCPU = cpu() - c0
		ingressSaves += saves.Load() - s0
		return acked, results
	}

	var buf, stock, rel, ing, res, relCPU, resCPU []float64
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	b.ResetTimer()
	for r := range ingressRounds {
		buf = append(buf, loopback(bufTopic))
		stock = append(stock, loopback(stockTopic))
		rel = append(rel, loopback(relayIn))
		relCPU = append(relCPU, us(loopCPU))
		acked, results := ingress(r)
		ing, res = append(ing, acked), append(res, results)
		resCPU = append(resCPU, us(ingressCPU))
	}
	b.StopTimer()
	mb, ms, ml, mi, mr := median(buf), median(stock), median(rel), median(ing), median(res)
	mrc, mlc := median(resCPU), median(relCPU)
	b.ReportMetric(mrc, "cpu-us/task")
	b.ReportMetric(mlc, "relay-cpu-us/msg")
	if mrc > 0 {
		b.ReportMetric(mlc/mrc, "cpu-relay-ratio")
	}
	b.ReportMetric(mr, "results/s")
	b.ReportMetric(mi, "tasks/s")
	b.ReportMetric(mb, "broker-msgs/s")
	b.ReportMetric(ms, "stock-msgs/s")
	b.ReportMetric(ml, "relay-msgs/s")
	b.ReportMetric(mr/ml, "relay-ratio")
	b.ReportMetric(mr/mb, "ratio")
	b.ReportMetric(mi/mb, "ack-ratio")
	b.ReportMetric(mr/ms, "stock-ratio")
	b.ReportMetric(float64(ingressSaves)/ingressRounds/float64(n), "saves/task")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d rounds of %d tasks of 1 KiB: results %.0f tasks/s (rounds %.0f), acknowledged %.0f tasks/s (rounds %.0f), "+
		"broker loopback %.0f msgs/s (rounds %.0f), with paho's own connection %.0f msgs/s (rounds %.0f), "+
		"relayed %.0f msgs/s (rounds %.0f); ratio %.2f (acknowledged %.2f), against paho's own connection %.2f, against the relay %.2f; "+
		"processor time %.1f µs a task (rounds %.1f), relayed %.1f µs a message (rounds %.1f)",
		ingressRounds, n, mr, res, mi, ing, mb, buf, ms, stock, ml, rel, mr/mb, mi/mb, mr/ms, mr/ml, mrc, resCPU, mlc, relCPU)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
