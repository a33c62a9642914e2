package mqtt_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// mqttProxy forwards TCP to a broker; it can drop the PUBACKs the broker
// sends and sever every connection.
type mqttProxy struct {
	ln          net.Listener
	target      string
	dropPubacks atomic.Bool
	mu          sync.Mutex // guards conns
	conns       []net.Conn
}

func startProxy(t *testing.T, target string) *mqttProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &mqttProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.sever() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { p.brokerToClient(s, c); c.Close() }()
		}
	}()
	return p
}

func (p *mqttProxy) url() string { return "tcp://" + p.ln.Addr().String() }

// brokerToClient copies MQTT packets, leaving out PUBACKs while asked to.
func (p *mqttProxy) brokerToClient(from, to net.Conn) {
	r := bufio.NewReader(from)
	for {
		first, err := r.ReadByte()
		if err != nil {
			return
		}
		head := []byte{first}
		n, mult := 0, 1
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			head = append(head, b)
			n += int(b&127) * mult
			mult *= 128
			if b&128 == 0 {
				break
			}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if first>>4 == 4 && p.dropPubacks.Load() {
			continue
		}
		if _, err := to.Write(append(head, body...)); err != nil {
			return
		}
	}
}

func (p *mqttProxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestMQTTResumeIsNoPuback: the publication of a result sent again after a
// reconnection is no PUBACK (paho's resume completed the interrupted
// publication's token without one). The result must stay in the outbox
// until a real PUBACK, or a crash right then would lose it.
func TestMQTTResumeIsNoPuback(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	proxy := startProxy(t, b.Addr().String())
	// A short PublishTimeout: a PUBACK the proxy dropped on a live
	// connection is only made up for by publishing again.
	a := startAgent(t, agentOpts{brokerURL: proxy.url(), cfg: func(c *mqtt.Config) { c.PublishTimeout = 2 * time.Second }})
	col := mqtttest.Collect(t, b.URL(), "observer", true, a.client.Topics().Results)

	outbox := func() int {
		s, err := a.rt.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(s.Outbox)
	}
	proxy.dropPubacks.Store(true)
	ev, _ := agent.TaskEvent(&agent.Task{TaskID: "r1", Input: json.RawMessage(`"x"`)}, "http", 0)
	if res := a.rt.Submit(context.Background(), ev); res.Err != nil {
		t.Fatal(res.Err)
	}
	wait.For(t, 5*time.Second, "the result published", func() bool { return len(col.Messages("")) > 0 })
	if outbox() != 1 {
		t.Fatal("the result left the outbox without a PUBACK")
	}
	// The connection breaks; the client reconnects and publishes it again.
	proxy.sever()
	wait.For(t, 10*time.Second, "the resumed publication", func() bool { return len(col.Messages("")) > 1 })
	wait.Settle(t, 500*time.Millisecond, "a result confirmed without a PUBACK would have left the outbox by now")
	if outbox() != 1 {
		t.Fatal("the result left the outbox on its resend, without a PUBACK")
	}
	proxy.dropPubacks.Store(false)
	wait.For(t, 10*time.Second, "the confirmation after a real PUBACK", func() bool { return outbox() == 0 })
}

// TestMQTTResendNotConfirmed: Mosquitto is killed and started again in the
// middle of a burst while no PUBACK reaches the agent (the proxy drops
// them): every result reaches the hub (those published before the kill
// are published again after it, with DUP), and none leaves the outbox, for
// no PUBACK came; once PUBACKs come through again, every result is
// confirmed. A client that took the resend after the reconnection for a
// confirmation (paho's resume did) fails here.
func TestMQTTResendNotConfirmed(t *testing.T) {
	const n = 40
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	proxy := startProxy(t, strings.TrimPrefix(m.URL(), "tcp://"))
	a := startAgent(t, agentOpts{brokerURL: proxy.url()})
	tp := a.client.Topics()
	col := mqtttest.Collect(t, m.URL(), "observer-resend", false, tp.Results)
	pub := publisher(t, m.URL())
	outbox := func() int {
		s, err := a.rt.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(s.Outbox)
	}
	results := func() int { return len(mqtttest.Results(t, col, tp.Results)) }

	proxy.dropPubacks.Store(true)
	for i := range n {
		mqtttest.Publish(t, pub, tp.Tasks, sleepTask(fmt.Sprintf("k%02d", i), 5))
	}
	wait.For(t, 20*time.Second, "half of the results at the hub", func() bool { return results() >= n/2 })
	m.Kill()
	m.Start()
	for i := n; i < 2*n; i++ {
		mqtttest.Publish(t, pub, tp.Tasks, sleepTask(fmt.Sprintf("k%02d", i), 5))
	}
	wait.For(t, 60*time.Second, "every result at the hub", func() bool { return results() == 2*n })
	wait.For(t, 20*time.Second, "every result in the outbox", func() bool { return outbox() == 2*n })
	wait.Settle(t, time.Second, "a result confirmed without its PUBACK would have left the outbox by now")
	if got := outbox(); got != 2*n {
		t.Fatalf("%d results left the outbox while no PUBACK reached the agent", 2*n-got)
	}
	if st := a.client.Stats(); st.Published != 0 {
		t.Fatalf("%d results counted as published while no PUBACK reached the agent", st.Published)
	}
	proxy.dropPubacks.Store(false)
	// The PUBACKs of the results published again come once the proxy
	// lets them through: after the next resend (PublishTimeout), or a
	// reconnection, whichever comes first.
	proxy.sever()
	wait.For(t, 30*time.Second, "every result confirmed", func() bool { return outbox() == 0 })
	if st := a.client.Stats(); st.Published != 2*n {
		t.Errorf("published %d, want %d", st.Published, 2*n)
	}
	ranOnce(t, mqtttest.Results(t, col, tp.Results))
}
