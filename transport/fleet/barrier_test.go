package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// slowRetained is a TCP proxy between a client and an MQTT broker that
// holds every retained PUBLISH of a topic under hold for delay on its way
// to the client, and every PUBLISH behind it (the PUBLISH packets keep
// their order), while the other packets (CONNACK, SUBACK, PUBACK, ...) go
// through at once. So it makes deterministic what a loaded client can do
// by itself: paho completes a SUBSCRIBE's token when it reads the SUBACK,
// while the retained messages read before it still wait for the message
// handler.
type slowRetained struct {
	ln    net.Listener
	hold  string
	delay time.Duration
}

func startSlowRetained(t *testing.T, broker, hold string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &slowRetained{ln: ln, hold: hold, delay: delay}
	relayTo(ln, broker, func(cc, bc net.Conn) bool {
		t.Cleanup(func() { cc.Close(); bc.Close() })
		go func() { _, _ = io.Copy(bc, cc); bc.Close() }()
		go p.toClient(bc, cc)
		return true
	})
	return "tcp://" + ln.Addr().String()
}

// relayTo accepts the connections of ln, dials the broker at brokerURL for
// each, and hands the two ends to serve, until ln is closed or serve
// returns false: the test proxies' accept loop.
func relayTo(ln net.Listener, brokerURL string, serve func(client, broker net.Conn) bool) {
	addr := strings.TrimPrefix(brokerURL, "tcp://")
	go func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			bc, err := net.Dial("tcp", addr)
			if err != nil {
				cc.Close()
				continue
			}
			if !serve(cc, bc) {
				return
			}
		}
	}()
}

// toClient copies the broker's packets to the client.
func (p *slowRetained) toClient(bc, cc net.Conn) {
	defer cc.Close()
	type held struct {
		pk  []byte
		due time.Time
	}
	var wmu sync.Mutex
	write := func(b []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = cc.Write(b)
	}
	pubs := make(chan held, 1024)
	defer close(pubs)
	go func() {
		for h := range pubs {
			time.Sleep(time.Until(h.due))
			write(h.pk)
		}
	}()
	r := bufio.NewReader(bc)
	for {
		pk, err := mqtttest.ReadPacket(r)
		if err != nil {
			return
		}
		if pk[0]>>4 != 3 { // not a PUBLISH
			write(pk)
			continue
		}
		h := held{pk: pk}
		if pk[0]&1 == 1 && strings.HasPrefix(publishTopic(pk), p.hold) {
			h.due = time.Now().Add(p.delay)
		}
		pubs <- h
	}
}

// publishTopic is the topic name of a PUBLISH packet.
func publishTopic(pk []byte) string {
	i := 1
	for pk[i]&0x80 != 0 {
		i++
	}
	i++
	if len(pk) < i+2 {
		return ""
	}
	l := int(pk[i])<<8 | int(pk[i+1])
	if len(pk) < i+2+l {
		return ""
	}
	return string(pk[i+2 : i+2+l])
}

// TestClaimWaitsForRetained: dev-a ran a task and its done claim is
// retained. A copy of the task reaches dev-b, whose hub is slow to hand it
// the retained claim (it reaches dev-b's handler after the SUBACK).
// dev-b must lose to the done claim without ever publishing a claim of its
// own: a claim published before the retained one was seen overwrites it
// on the hub (retained is the last one written), and a dev-b killed before
// its claim came back found its own claim retained when it returned, and
// ran the task a second time (make fleet-sim saw it).
// On Mosquitto and on the embedded broker.
func TestClaimWaitsForRetained(t *testing.T) {
	t.Run("mosquitto", func(t *testing.T) {
		claimWaitsForRetained(t, mqtttest.StartMosquitto(t, mqtttest.Options{}).URL())
	})
	t.Run("embedded", func(t *testing.T) {
		b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		claimWaitsForRetained(t, b.URL())
	})
}

func claimWaitsForRetained(t *testing.T, url string) {
	start := func(dev, broker string) *Claims {
		c, err := StartClaims(ClaimsConfig{Broker: broker, Prefix: "openstarry", Device: dev, Agent: "master",
			DefendFor: time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a := start("dev-a", url)
	ctx := context.Background()
	const id = "t-done"
	if owner, mine, err := a.Claim(ctx, id); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("dev-a: %s %v %v", owner, mine, err)
	}
	a.Done(id)
	topic := ClaimTopic("openstarry", id)
	col := mqtttest.Collect(t, url, "watch", true, topic)
	wait.For(t, 10*time.Second, "dev-a's done claim retained", func() bool {
		ms := col.Messages(topic)
		var cl Claim
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &cl) == nil && cl.State == ClaimDone && cl.Device == "dev-a"
	})

	b := start("dev-b", startSlowRetained(t, url, "openstarry/fleet/claims/", 2*time.Second))
	if owner, mine, err := b.Claim(ctx, id); err != nil || mine || owner != "dev-a" {
		t.Fatalf("dev-b, a copy of dev-a's done task: %s %v %v, want dev-a's", owner, mine, err)
	}
	// Whatever dev-b published reached the watcher before its own
	// retained look at the topic below.
	look := mqtttest.Collect(t, url, "look", true, topic)
	var last Claim
	wait.For(t, 10*time.Second, "the retained claim", func() bool {
		ms := look.Messages(topic)
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &last) == nil
	})
	if last.Device != "dev-a" || last.State != ClaimDone {
		t.Errorf("retained after dev-b's claim: %+v, want dev-a's done claim", last)
	}
	for _, msg := range col.Messages(topic) {
		var cl Claim
		if json.Unmarshal(msg.Payload, &cl) == nil && cl.Device == "dev-b" {
			t.Errorf("dev-b published a claim over dev-a's done claim before it saw it: %s", msg.Payload)
		}
	}
}

// TestClaimsBarrierRefused: a hub whose ACL lets devices claim but not
// use their own topics drops the barrier; the claims go without it
// (logged), and fleet tasks still run.
func TestClaimsBarrierRefused(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite openstarry/fleet/claims/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"acl_file " + acl}})
	var logged logbuf.Buffer
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Mosquitto grants the subscription and drops the barrier's publish:
	// the first claim fails when the barrier does not come back (the
	// agent asks again, as here), the next ones go without it.
	wait.For(t, 90*time.Second, "t-1 claimed", func() bool {
		owner, mine, err := c.Claim(context.Background(), "t-1")
		return err == nil && mine && owner == "dev-a"
	})
	if owner, mine, err := c.Claim(context.Background(), "t-2"); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("t-2: %s %v %v", owner, mine, err)
	}
	if s := logged.String(); !strings.Contains(s, "claims' barrier") {
		t.Errorf("no error logged about the barrier; the log:\n%s", s)
	}
}
