package broker

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// rawClient speaks MQTT 3.1.1 byte by byte, so that a test chooses its
// packet ids and when (or whether) it acknowledges.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, url, id string) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	t.Cleanup(func() { conn.Close() })
	// CONNECT, clean session off: the session outlives the connection.
	var body []byte
	body = append(body, 0, 4, 'M', 'Q', 'T', 'T', 4, 0, 0, 60)
	body = append(body, str(id)...)
	c.write(0x10, body)
	if typ, _ := c.read(); typ != 2 {
		t.Fatalf("CONNACK expected, got packet type %d", typ)
	}
	return c
}

func str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

func (c *rawClient) write(header byte, body []byte) {
	c.t.Helper()
	pkt := []byte{header}
	n := len(body)
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		pkt = append(pkt, b)
		if n == 0 {
			break
		}
	}
	if _, err := c.conn.Write(append(pkt, body...)); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next packet's type and body, or type 0 after 3 s of
// silence.
func (c *rawClient) read() (byte, []byte) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	h, err := c.r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	n, mul := 0, 1
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatal(err)
		}
		n += int(b&0x7f) * mul
		mul *= 128
		if b&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := c.r.Read(body); err != nil && n > 0 {
		c.t.Fatal(err)
	}
	return h >> 4, body
}

// publishOf decodes a QoS 1 PUBLISH body: topic, packet id, payload.
func publishOf(body []byte) (string, uint16, string) {
	tl := int(body[0])<<8 | int(body[1])
	topic := string(body[2 : 2+tl])
	id := uint16(body[2+tl])<<8 | uint16(body[3+tl])
	return topic, id, string(body[4+tl:])
}

// TestPacketIDsOfBothDirections: a client publishing under the packet id of
// a message the broker delivered to it and that it has not acknowledged yet
// does not make the broker forget that message. MQTT numbers the two
// directions apart; mochi v2.7.9 deleted the delivery (processPublish), so
// that a client that crashed before acknowledging never got it again: an
// agent publishing a result while a task to it was in flight lost the task.
func TestPacketIDsOfBothDirections(t *testing.T) {
	b := startBroker(t, Config{DataDir: t.TempDir()})
	agent := dialRaw(t, b.URL(), "agent-raw")
	agent.write(0x82, append([]byte{0, 1}, append(str("t/in"), 1)...))
	if typ, _ := agent.read(); typ != 9 {
		t.Fatalf("SUBACK expected, got %d", typ)
	}
	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	defer pub.client.Disconnect(50)
	if tok := pub.client.Publish("t/in", 1, false, "task-1"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	typ, body := agent.read()
	if typ != 3 {
		t.Fatalf("PUBLISH expected, got %d", typ)
	}
	_, id, payload := publishOf(body)
	if payload != "task-1" {
		t.Fatalf("delivered %q", payload)
	}
	// Not acknowledged. The agent publishes under the same packet id.
	out := append(str("t/out"), byte(id>>8), byte(id))
	agent.write(0x32, append(out, "result-1"...))
	if typ, _ := agent.read(); typ != 4 {
		t.Fatalf("PUBACK expected, got %d", typ)
	}
	agent.conn.Close() // a crash before acknowledging task-1

	again := dialRaw(t, b.URL(), "agent-raw")
	typ, body = again.read()
	if typ != 3 {
		t.Fatalf("task-1 was not delivered again after the reconnection (packet type %d)", typ)
	}
	if _, _, p := publishOf(body); p != "task-1" {
		t.Fatalf("delivered again: %q", p)
	}
}
