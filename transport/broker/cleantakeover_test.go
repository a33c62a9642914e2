package broker

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// wireClient is an MQTT 3.1.1 client with a clean session on the codec of
// transport/mqtt/wire, so that a test decides the instant its connection
// ends.
type wireClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialWire(t *testing.T, addr, id string) *wireClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := wire.Login(conn, wire.ConnectOptions{ClientID: id, KeepAlive: 30 * time.Second, CleanSession: true}, 5*time.Second, 4096)
	if err != nil {
		conn.Close()
		t.Fatalf("%s: %v", id, err)
	}
	return &wireClient{conn: conn, r: r}
}

// subscribe subscribes to topic at QoS 1 and waits for its SUBACK.
func (c *wireClient) subscribe(t *testing.T, topic string) {
	t.Helper()
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(wire.EncodeSubscribe(1, []string{topic}, []byte{1})); err != nil {
		t.Fatal(err)
	}
	typ, _, _, err := wire.ReadPacket(c.r, nil, 1<<16)
	if err != nil || typ != wire.Suback {
		t.Fatalf("SUBACK: packet type %d, %v", typ, err)
	}
	_ = c.conn.SetDeadline(time.Time{})
}

// next returns the topic of the next PUBLISH within limit ("" if none).
func (c *wireClient) next(limit time.Duration) string {
	_ = c.conn.SetReadDeadline(time.Now().Add(limit))
	for {
		typ, flags, body, err := wire.ReadPacket(c.r, nil, 1<<16)
		if err != nil {
			return ""
		}
		if typ == wire.Publish {
			p, err := wire.DecodePublish(flags, body)
			if err != nil {
				return ""
			}
			if p.QoS > 0 {
				_, _ = c.conn.Write(wire.AppendPuback(nil, p.ID))
			}
			return p.Topic
		}
	}
}

// A client with a clean session that connects again while the broker is
// still tearing down its previous connection keeps what the new
// connection subscribed to: mochi's teardown of the old connection, once
// past its check that no one took the session over, removed the client id
// from the broker's clients, though it now named the new connection, and
// a message to the new connection's subscription went nowhere (a device's
// claims connection, restarted at once, waited for its barrier message in
// vain: TestClaimRaceLoserKilled failed now and then under load).
func TestCleanTakeoverKeepsNewClient(t *testing.T) {
	b := startBroker(t, Config{})
	addr := strings.TrimPrefix(b.URL(), "tcp://")
	pub := dialWire(t, addr, "publisher")
	defer pub.conn.Close()
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	lost := 0
	for i := range rounds {
		topic := "takeover/" + string(rune('a'+i%26)) + "/" + time.Now().Format("150405.000000000")
		old := dialWire(t, addr, "restarting")
		old.subscribe(t, topic)
		// The old connection ends and the new one comes at once, as a
		// process killed and started again by its supervisor.
		old.conn.Close()
		if i%3 == 1 {
			time.Sleep(time.Duration(i%7) * 20 * time.Microsecond)
		}
		nc := dialWire(t, addr, "restarting")
		nc.subscribe(t, topic)
		time.Sleep(time.Millisecond) // the old connection's teardown, if still under way, ends
		if _, err := pub.conn.Write(wire.AppendPublish(nil, topic, []byte("x"), 0, 0, false, false)); err != nil {
			t.Fatal(err)
		}
		if got := nc.next(2 * time.Second); got != topic {
			lost++
		}
		nc.conn.Close()
	}
	if lost > 0 {
		t.Fatalf("%d of %d reconnections lost what they subscribed to", lost, rounds)
	}
}
