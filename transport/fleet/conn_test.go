package fleet

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// cutProxy is a TCP proxy to a broker whose connections the test can cut,
// and which refuses new ones while down.
type cutProxy struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func startCutProxy(t *testing.T, broker string) (*cutProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &cutProxy{}
	relayTo(ln, broker, func(cc, bc net.Conn) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.down {
			cc.Close()
			bc.Close()
			return true
		}
		p.conns = append(p.conns, cc, bc)
		go func() { _, _ = io.Copy(bc, cc); bc.Close() }()
		go func() { _, _ = io.Copy(cc, bc); cc.Close() }()
		return true
	})
	t.Cleanup(func() { p.cut(true) })
	return p, "tcp://" + ln.Addr().String()
}

// cut closes every connection, and sets whether new ones are refused.
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestClaimsConnectionLost: the claims' connection comes back after the
// hub was unreachable, a claim made meanwhile fails at once (the agent asks
// again), and the done claim of a task finished while the hub was
// unreachable is published once it is back: the task's claim on the hub
// becomes done (held 24 h), not left running (1 h, after which a copy
// would run again elsewhere).
func TestClaimsConnectionLost(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	proxy, url := startCutProxy(t, m.URL())
	c, err := StartClaims(ClaimsConfig{Broker: url, Prefix: "openstarry", Device: "dev-a", Agent: "master",
		DefendFor: time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if owner, mine, err := c.Claim(ctx, "t-1"); err != nil || !mine {
		t.Fatalf("t-1: %s %v %v", owner, mine, err)
	}
	time.Sleep(10 * time.Millisecond) // past DefendFor: Done publishes at once

	proxy.cut(true)
	wait.For(t, 10*time.Second, "the claims to see the connection lost", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.up
	})
	c.Done("t-1")
	start := time.Now()
	if _, _, err := c.Claim(ctx, "t-2"); err == nil {
		t.Fatal("a claim made while the hub is unreachable succeeded")
	} else if time.Since(start) > 5*time.Second {
		t.Fatalf("a claim made while the hub is unreachable failed only after %s: %v", time.Since(start), err)
	}

	proxy.cut(false)
	wait.For(t, 20*time.Second, "the claims to connect again", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.up
	})
	watch := mqtttest.Collect(t, m.URL(), "watch", true, ClaimTopic("openstarry", "t-1"))
	wait.For(t, 10*time.Second, "t-1's done claim on the hub", func() bool {
		for _, msg := range watch.Messages("") {
			var cl Claim
			if json.Unmarshal(msg.Payload, &cl) == nil && cl.State == ClaimDone && cl.Device == "dev-a" {
				return true
			}
		}
		return false
	})
	if owner, mine, err := c.Claim(ctx, "t-2"); err != nil || !mine {
		t.Fatalf("t-2 once connected again: %s %v %v", owner, mine, err)
	}
}

// TestClaimsCloseNotConnected: Close of claims that never connected (an
// agent that stopped before its own client connected) returns at once.
func TestClaimsCloseNotConnected(t *testing.T) {
	c, err := NewClaims(ClaimsConfig{Broker: "tcp://127.0.0.1:9", Prefix: "openstarry", Device: "dev-a", Agent: "master", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close of claims never connected did not return")
	}
}
