package broker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestAckGate: a QoS 1 message routed to a persistent session is
// acknowledged to its publisher once the subscriber acknowledged it, and
// then broker.db is not written; when the subscriber does not acknowledge
// within the hold, the broker stores the message first, and a restarted
// broker delivers it.
func TestAckGate(t *testing.T) {
	const topic = "openstarry/d/agents/a/tasks"
	const hold = 300 * time.Millisecond
	dir := t.TempDir()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log, AckHold: hold})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.Addr().String()
	db := filepath.Join(dir, DBFile)

	// A subscriber that acknowledges at once: no write at all.
	got := make(chan string, 16)
	sub := connect(t, b.URL(), "agent-1", "", "", false, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	if sub.err != nil {
		t.Fatal(sub.err)
	}
	if tok := sub.client.Subscribe(topic, 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal("subscribe")
	}
	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	mqtttest.Publish(t, pub.client, topic, []byte("warm"))
	<-got
	before := stat(t, db)
	for i := range 20 {
		start := time.Now()
		mqtttest.Publish(t, pub.client, topic, fmt.Appendf(nil, "m%d", i))
		if took := time.Since(start); took >= hold {
			t.Errorf("m%d acknowledged after %s: the subscriber's acknowledgement should have opened the gate", i, took)
		}
		if m := <-got; m != fmt.Sprintf("m%d", i) {
			t.Fatalf("got %q", m)
		}
	}
	if after := stat(t, db); !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Errorf("broker.db written for messages the subscriber took: %v %d → %v %d",
			before.ModTime(), before.Size(), after.ModTime(), after.Size())
	}

	// A subscriber that never acknowledges: the PUBACK waits for the hold
	// and the broker's own copy.
	sub.client.Disconnect(50)
	slow := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("agent-1").SetCleanSession(false).
		SetProtocolVersion(4).SetAutoReconnect(false).SetAutoAckDisabled(true).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }))
	if tok := slow.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	start := time.Now()
	mqtttest.Publish(t, pub.client, topic, []byte("kept"))
	if took := time.Since(start); took < hold {
		t.Errorf("acknowledged after %s, before the hold (%s): nothing held the message yet", took, hold)
	}
	if m := <-got; m != "kept" {
		t.Fatalf("got %q", m)
	}
	if after := stat(t, db); after.ModTime().Equal(before.ModTime()) {
		t.Error("broker.db not written for a message no subscriber acknowledged")
	}
	slow.Disconnect(0)
	pub.client.Disconnect(50)
	b.Close()

	b2, err := Start(context.Background(), Config{Listen: addr, DataDir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	again := connect(t, b2.URL(), "agent-1", "", "", false, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	if again.err != nil {
		t.Fatal(again.err)
	}
	select {
	case m := <-got:
		if m != "kept" {
			t.Fatalf("after the restart got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stored message was not delivered after the restart")
	}
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// TestGateConnWrite: whole packets pass, a PUBACK whose gate is closed and
// every PUBACK behind it wait, in order, other packets pass them.
func TestGateConnWrite(t *testing.T) {
	r := &recorder{}
	c := &gateConn{Conn: r, gates: map[uint16]*gate{}}
	g1 := &gate{id: 1}
	c.expect(g1)
	puback := func(id byte) []byte { return []byte{0x40, 2, 0, id} }
	publish := []byte{0x30, 3, 0, 1, 'x'}
	in := append(append(append(puback(1), publish...), puback(2)...), 0xd0, 0) // PUBACK 1, PUBLISH, PUBACK 2, PINGRESP
	if n, err := c.Write(in); n != len(in) || err != nil {
		t.Fatalf("Write: %d %v", n, err)
	}
	if want := append(append([]byte(nil), publish...), 0xd0, 0); string(r.b) != string(want) {
		t.Fatalf("passed % x, want % x", r.b, want)
	}
	g1.open.Store(true)
	c.release()
	want := append(append(append(append([]byte(nil), publish...), 0xd0, 0), puback(1)...), puback(2)...)
	if string(r.b) != string(want) {
		t.Fatalf("after release % x, want % x", r.b, want)
	}
	if len(c.gates) != 0 || len(c.held) != 0 {
		t.Fatalf("left %v %v", c.gates, c.held)
	}
}

// TestGateConnWriteHeldInTheMiddle: a PUBACK held in the middle of a write
// leaves what came before it and what follows it to pass, in order; a
// write with nothing held goes out as it is, not copied.
func TestGateConnWriteHeldInTheMiddle(t *testing.T) {
	r := &recorder{}
	c := &gateConn{Conn: r, gates: map[uint16]*gate{}}
	g := &gate{id: 7}
	c.expect(g)
	puback := func(id byte) []byte { return []byte{0x40, 2, 0, id} }
	publish := []byte{0x30, 3, 0, 1, 'x'}
	in := append(append(append(append([]byte(nil), publish...), puback(3)...), puback(7)...), publish...)
	if n, err := c.Write(in); n != len(in) || err != nil {
		t.Fatalf("Write: %d %v", n, err)
	}
	want := append(append(append([]byte(nil), publish...), puback(3)...), publish...)
	if string(r.b) != string(want) {
		t.Fatalf("passed % x, want % x", r.b, want)
	}
	g.open.Store(true)
	c.release()
	if want = append(want, puback(7)...); string(r.b) != string(want) {
		t.Fatalf("after release % x, want % x", r.b, want)
	}

	r.b, r.last = nil, nil
	pass := append(append([]byte(nil), publish...), puback(9)...)
	if _, err := c.Write(pass); err != nil {
		t.Fatal(err)
	}
	if string(r.b) != string(pass) || &r.last[0] != &pass[0] {
		t.Fatalf("a write with nothing held: passed % x (copied: %v), want % x as it is", r.b, &r.last[0] != &pass[0], pass)
	}
}

// TestGateConnReleaseSoon: PUBACKs released by another client's goroutine
// (a subscriber's acknowledgement) leave with the next write to their
// publisher, in order and ahead of it, in one write; the flusher writes
// them when no write came first, and is scheduled once for all of them.
func TestGateConnReleaseSoon(t *testing.T) {
	puback := func(id byte) []byte { return []byte{0x40, 2, 0, id} }
	publish := []byte{0x30, 3, 0, 1, 'x'}
	held := func(ids ...byte) (*gateConn, *recorder, *[]func(), []*gate) {
		r := &recorder{}
		var scheduled []func()
		c := &gateConn{Conn: r, gates: map[uint16]*gate{}, later: func(f func()) { scheduled = append(scheduled, f) }}
		var gs []*gate
		for _, id := range ids {
			g := &gate{id: uint16(id)}
			c.expect(g)
			gs = append(gs, g)
			if _, err := c.Write(puback(id)); err != nil {
				t.Fatal(err)
			}
		}
		if r.writes != 0 {
			t.Fatalf("a PUBACK whose gate is closed written: % x", r.b)
		}
		return c, r, &scheduled, gs
	}

	t.Run("with the next write", func(t *testing.T) {
		c, r, scheduled, gs := held(1, 2)
		for _, g := range gs {
			g.open.Store(true)
			c.releaseSoon()
		}
		if r.writes != 0 || len(*scheduled) != 1 {
			t.Fatalf("after releaseSoon: %d writes (% x), %d flushers scheduled; want none written, one flusher", r.writes, r.b, len(*scheduled))
		}
		if _, err := c.Write(publish); err != nil {
			t.Fatal(err)
		}
		want := append(append(puback(1), puback(2)...), publish...)
		if r.writes != 1 || string(r.b) != string(want) {
			t.Fatalf("%d writes of % x, want one of % x", r.writes, r.b, want)
		}
		(*scheduled)[0]()
		if r.writes != 1 {
			t.Fatalf("the flusher wrote again: % x", r.b)
		}
	})
	t.Run("by the flusher", func(t *testing.T) {
		c, r, scheduled, gs := held(3, 4)
		gs[0].open.Store(true)
		c.releaseSoon()
		(*scheduled)[0]()
		if r.writes != 1 || string(r.b) != string(puback(3)) {
			t.Fatalf("%d writes of % x, want one of % x", r.writes, r.b, puback(3))
		}
		// PUBACK 4 is still held; a write passes it, and a flusher is
		// scheduled again for the next release.
		if _, err := c.Write(publish); err != nil {
			t.Fatal(err)
		}
		gs[1].open.Store(true)
		c.releaseSoon()
		if len(*scheduled) != 2 {
			t.Fatalf("%d flushers scheduled, want 2", len(*scheduled))
		}
		(*scheduled)[1]()
		want := append(append(puback(3), publish...), puback(4)...)
		if r.writes != 3 || string(r.b) != string(want) {
			t.Fatalf("%d writes of % x, want 3 of % x", r.writes, r.b, want)
		}
	})
	t.Run("behind a closed gate", func(t *testing.T) {
		// A PUBACK whose gate opens behind one still closed waits for it.
		c, r, scheduled, gs := held(5, 6)
		gs[1].open.Store(true)
		c.releaseSoon()
		if len(*scheduled) != 0 {
			t.Fatal("a flusher scheduled with nothing to write")
		}
		if _, err := c.Write(publish); err != nil {
			t.Fatal(err)
		}
		gs[0].open.Store(true)
		c.release()
		want := append(append(publish, puback(5)...), puback(6)...)
		if r.writes != 2 || string(r.b) != string(want) {
			t.Fatalf("%d writes of % x, want 2 of % x", r.writes, r.b, want)
		}
	})
}

// TestGateConnReleaseLater: the PUBACK of an agent's result leaves with the
// next write to the agent, in one write, or on its own once the delay is
// over.
func TestGateConnReleaseLater(t *testing.T) {
	puback := func(id byte) []byte { return []byte{0x40, 2, 0, id} }
	publish := []byte{0x30, 3, 0, 1, 'x'}
	r := &recorder{}
	c := &gateConn{Conn: r, gates: map[uint16]*gate{}}
	hold := func(id byte) {
		t.Helper()
		g := &gate{id: uint16(id)}
		c.expect(g)
		if _, err := c.Write(puback(id)); err != nil {
			t.Fatal(err)
		}
		g.open.Store(true)
	}
	state := func() (int, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return r.writes, string(r.b)
	}

	hold(1)
	c.releaseLater(time.Hour)
	if n, b := state(); n != 0 {
		t.Fatalf("written at once: % x", b)
	}
	if _, err := c.Write(publish); err != nil {
		t.Fatal(err)
	}
	want := string(append(puback(1), publish...))
	if n, b := state(); n != 1 || b != want {
		t.Fatalf("%d writes of % x, want one of % x", n, b, want)
	}

	hold(2)
	c.releaseLater(time.Millisecond)
	want += string(puback(2))
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, b := state()
		if n == 2 && b == want {
			break
		}
		if n > 2 || time.Now().After(deadline) {
			t.Fatalf("%d writes of % x, want 2 of % x", n, b, want)
		}
		time.Sleep(time.Millisecond)
	}

	// A burst of results with no task after it: the PUBACKs wait for no
	// more than maxLater of them, and go out together.
	var burst string
	for i := range maxLater {
		hold(byte(10 + i))
		c.releaseLater(time.Hour)
		burst += string(puback(byte(10 + i)))
	}
	want += burst
	if n, b := state(); n != 3 || b != want {
		t.Fatalf("after %d PUBACKs of results: %d writes, want 3 (the %d in one)", maxLater, n, maxLater)
	}
}

// TestResultsTopic: the topics whose PUBACKs wait for the next packet to
// the publisher are the agents' results topics, and those only.
func TestResultsTopic(t *testing.T) {
	lazy := resultsTopic("openstarry")
	for topic, want := range map[string]bool{
		"openstarry/dev/agents/master/results":   true,
		"openstarry/d-1/agents/a_b/results":      true,
		"openstarry/dev/agents/master/tasks":     false,
		"openstarry/dev/agents/master/progress":  false,
		"openstarry/dev/status":                  false,
		"openstarry/fleet/claims/t1":             false,
		"openstarry/dev/agents//results":         false,
		"openstarry//agents/master/results":      false,
		"openstarry/dev/x/agents/master/results": false,
		"openstarry/dev/agents/master/x/results": false,
		"other/dev/agents/master/results":        false,
		"openstarryx/dev/agents/master/results":  false,
		"openstarry/dev/agents/master/results/x": false,
		"openstarry/dev/agents/master/resultsx":  false,
		"results":                                false,
		"":                                       false,
	} {
		if got := lazy(topic); got != want {
			t.Errorf("%q: %v, want %v", topic, got, want)
		}
	}
}

// recorder is a net.Conn that keeps what is written.
type recorder struct {
	net.Conn
	b      []byte
	last   []byte // the slice of the last Write
	writes int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.b, r.last = append(r.b, p...), p
	r.writes++
	return len(p), nil
}

// FuzzGateConnWrite: whatever mochi writes, a connection with no gate
// passes it unchanged, and one whose every PUBACK is held never panics and
// passes everything once released.
func FuzzGateConnWrite(f *testing.F) {
	f.Add([]byte{0x40, 2, 0, 1, 0x30, 3, 0, 1, 'x'})
	f.Add([]byte{0x40, 0x80})
	f.Add([]byte{0x40, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, p []byte) {
		r := &recorder{}
		c := &gateConn{Conn: r, gates: map[uint16]*gate{}}
		if _, err := c.Write(p); err != nil || string(r.b) != string(p) {
			t.Fatalf("no gate: wrote % x for % x (%v)", r.b, p, err)
		}
		r.b = nil
		closed := &gate{}
		held := &gateConn{Conn: r, gates: map[uint16]*gate{}}
		for _, id := range []uint16{0, 1, 2, 3, 0x100, 0xffff} {
			held.gates[id] = closed
		}
		if _, err := held.Write(p); err != nil {
			t.Fatal(err)
		}
		closed.open.Store(true)
		held.release()
		if len(r.b) != len(p) {
			t.Fatalf("after release wrote %d bytes of %d", len(r.b), len(p))
		}
	})
}
