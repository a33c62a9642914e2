package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/procstat"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// startLogged starts a broker whose log the test reads.
func startLogged(t *testing.T, cfg Config) (*Broker, *logbuf.Buffer) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	var lb logbuf.Buffer
	cfg.Log = zerolog.New(&lb).Level(zerolog.InfoLevel)
	b, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		if t.Failed() {
			t.Logf("broker log:\n%s", lb.String())
		}
	})
	return b, &lb
}

// mqttLength encodes n as MQTT's variable-length remaining length.
func mqttLength(n int) []byte {
	var out []byte
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			return out
		}
	}
}

// connect311 is an MQTT 3.1.1 CONNECT of client id, clean session, no
// keepalive.
func connect311(id string) []byte {
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, byte(len(id))}
	body = append(body, id...)
	return append(append([]byte{0x10}, mqttLength(len(body))...), body...)
}

// flood sends a packet header claiming size bytes, then streams size bytes
// of zeros, and returns how many the broker took before it closed the
// connection (or all of them).
func flood(addr string, header []byte, size int) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.Write(append(header, mqttLength(size)...)); err != nil {
		return 0, nil
	}
	chunk := make([]byte, 1<<20)
	sent := 0
	for sent < size {
		n, err := c.Write(chunk[:min(len(chunk), size-sent)])
		sent += n
		if err != nil {
			return sent, nil // refused
		}
	}
	return sent, nil
}

// procStatus reads a field (VmRSS, VmHWM) of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	n, err := procstat.Bytes(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBrokerChild is the broker process of TestBoundsMemory: it runs only
// when started by it, with the default bounds, prints its address and
// serves until its standard input closes.
func TestBrokerChild(t *testing.T) {
	if os.Getenv("OPENSTARRY_TEST_BROKER_CHILD") != "1" {
		t.Skip("the broker process of TestBoundsMemory")
	}
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: zerolog.New(os.Stderr)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fmt.Printf("ADDR %s\n", b.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestBoundsMemory measures the broker's process under what issue #28
// reported: three unauthenticated 200 MB CONNECTs (the process grew from
// 18 MB to 996 MB) and an anonymous 100 MB PUBLISH on loopback. With the
// default bounds each is refused once its length is read, and the process's
// peak resident memory (VmHWM) stays within 64 MiB of what it was before.
func TestBoundsMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc (Linux) to measure the broker's process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OPENSTARRY_TEST_BROKER_CHILD=1")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("broker process's log:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("broker process: %q, %v\n%s", line, err, stderr.String())
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
	pid := cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")

	const connectSize, publishSize = 200 << 20, 100 << 20
	var wg sync.WaitGroup
	taken := make([]int, 4)
	errs := make([]error, 4)
	for i := range 3 {
		wg.Go(func() { taken[i], errs[i] = flood(addr, []byte{0x10}, connectSize) })
	}
	wg.Wait()
	// An anonymous loopback client, connected, publishes 100 MB.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(connect311("big-publisher")); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK % x, %v", ack, err)
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	topic := "openstarry/d1/tasks/a1"
	header := []byte{0x30}
	body := append([]byte{0, byte(len(topic))}, topic...)
	_, _ = c.Write(append(append(header, mqttLength(len(body)+publishSize)...), body...))
	chunk := make([]byte, 1<<20)
	for sent := 0; sent < publishSize; {
		n, err := c.Write(chunk[:min(len(chunk), publishSize-sent)])
		sent += n
		taken[3] = sent
		if err != nil {
			break
		}
	}
	c.Close()

	peak := procStatus(t, pid, "VmHWM")
	after := procStatus(t, pid, "VmRSS")
	t.Logf("broker process: VmRSS %.1f MiB before, %.1f MiB after; peak VmHWM %.1f MiB; bytes it took of three %d MB CONNECTs %v and of a %d MB PUBLISH %d",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(peak)/(1<<20), connectSize>>20, taken[:3], publishSize>>20, taken[3])
	for i, err := range errs[:3] {
		if err != nil {
			t.Errorf("CONNECT %d: %v", i, err)
		}
	}
	if peak-before > 64<<20 {
		t.Errorf("the broker's process peaked at %.1f MiB, %.1f MiB above the %.1f MiB it had before: the packets were buffered, not refused",
			float64(peak)/(1<<20), float64(peak-before)/(1<<20), float64(before)/(1<<20))
	}
	wait.For(t, 30*time.Second, "the log lines of the refusals", func() bool {
		s := stderr.String()
		return strings.Count(s, "read connection: packet too large: 209715201 bytes, the maximum is 1048576") == 3 &&
			strings.Contains(s, "client disconnected: it sent a packet larger than 1048576 bytes")
	})
}

// TestConnectTimeout: sockets that never send CONNECT are closed after the
// connect timeout (issue #28: 50 stayed open for 75 s), with a log line; a
// client that connected is not.
func TestConnectTimeout(t *testing.T) {
	b, lb := startLogged(t, Config{ConnectTimeout: 500 * time.Millisecond})
	res := connect(t, b.URL(), "connected", "", "", true, nil)
	if res.err != nil {
		t.Fatal(res.err)
	}
	var conns []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("socket %d without CONNECT: read %d bytes, %v; want it closed by the broker", i, n, err)
		}
	}
	wait.For(t, 10*time.Second, "50 log lines", func() bool {
		return len(lb.Lines("warn", "no CONNECT within 500ms (mqtt.broker_connect_timeout)")) == 50
	})
	if !res.client.IsConnectionOpen() {
		t.Error("the client that sent its CONNECT was disconnected")
	}
	if tok := res.client.Publish("x/y", 1, false, "still here"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Errorf("the connected client cannot publish: %v", tok.Error())
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestMaxConnections: beyond the cap a connection is closed at once (issue
// #28: 500 clients were accepted), with a log line; once one closes, a new
// client connects.
func TestMaxConnections(t *testing.T) {
	const max = 8
	b, lb := startLogged(t, Config{MaxConnections: max})
	var conns []net.Conn
	for range max {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	if res := connect(t, b.URL(), "one-too-many", "", "", true, nil); res.err == nil {
		t.Fatalf("connection %d of a broker capped at %d was accepted", max+1, max)
	}
	wait.For(t, 10*time.Second, "the refusal's log line", func() bool {
		return len(lb.Lines("warn", "connection refused: 8 connections are open, the maximum for this client (mqtt.broker_max_connections is 8")) > 0
	})
	conns[0].Close()
	wait.Until(t, 30*time.Second, "a connection once one closed", func() error {
		return connect(t, b.URL(), "room-again", "", "", true, nil).err
	})
}

// TestMaxPacket: a PUBLISH larger than the maximum disconnects its client
// with a log line and reaches no subscriber; one within it is delivered.
func TestMaxPacket(t *testing.T) {
	b, lb := startLogged(t, Config{MaxPacketBytes: 64 << 10})
	got := make(chan string, 10)
	sub := connect(t, b.URL(), "sub", "", "", true, nil)
	if sub.err != nil {
		t.Fatal(sub.err)
	}
	if tok := sub.client.Subscribe("big/#", 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	pub.client.Publish("big/over", 0, false, bytes.Repeat([]byte{'x'}, 64<<10))
	wait.For(t, 30*time.Second, "the publisher disconnected", func() bool { return !pub.client.IsConnectionOpen() })
	wait.For(t, 10*time.Second, "the log line", func() bool {
		return len(lb.Lines("warn", "client disconnected: it sent a packet larger than 65536 bytes (mqtt.broker_max_packet_bytes)")) == 1
	})
	pub2 := connect(t, b.URL(), "pub2", "", "", true, nil)
	if pub2.err != nil {
		t.Fatal(pub2.err)
	}
	if tok := pub2.client.Publish("big/under", 1, false, bytes.Repeat([]byte{'x'}, 60<<10)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	select {
	case topic := <-got:
		if topic != "big/under" {
			t.Fatalf("delivered %s, want big/under only", topic)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the message within the maximum was not delivered")
	}
}

// retainedTopics returns the retained topics under filter that a new
// subscriber receives, with their payload sizes.
func retainedTopics(t *testing.T, url, filter string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	res := connect(t, url, "retained-reader", "", "", true, nil)
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.client.Disconnect(50)
	tok := res.client.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got[m.Topic()] = len(m.Payload())
		mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	// The broker sends the retained messages right after the SUBACK; a
	// QoS 1 round trip of our own on the same connection comes after them.
	if tok := res.client.Publish("sync/reader", 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	wait.Settle(t, 200*time.Millisecond, "retained messages already sent are handled")
	mu.Lock()
	defer mu.Unlock()
	return got
}

// TestMaxRetained: the retained messages stay within their bound (issue
// #28: a 100 MB retained publish grew broker.db to 150 MB), across a
// restart; replacing one with a smaller one and clearing one make room; an
// MQTT 5 publisher is told (PUBACK 0x97, quota exceeded).
func TestMaxRetained(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, MaxRetainedBytes: 1000}
	b, lb := startLogged(t, cfg)
	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	publish := func(c paho.Client, topic string, n int) {
		t.Helper()
		if tok := c.Publish(topic, 1, true, bytes.Repeat([]byte{'r'}, n)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}
	publish(pub.client, "ret/a", 600) // 605 bytes retained
	publish(pub.client, "ret/b", 600) // would be 1210: refused
	if got := retainedTopics(t, b.URL(), "ret/#"); len(got) != 1 || got["ret/a"] != 600 {
		t.Fatalf("retained %v, want ret/a (600) alone", got)
	}
	if n := len(lb.Lines("warn", "retained message refused: the retained messages would exceed 1000 bytes")); n != 1 {
		t.Fatalf("%d log lines of a refused retained message, want 1", n)
	}
	publish(pub.client, "ret/a", 300) // 305
	publish(pub.client, "ret/b", 600) // 910
	if got := retainedTopics(t, b.URL(), "ret/#"); len(got) != 2 || got["ret/a"] != 300 || got["ret/b"] != 600 {
		t.Fatalf("retained %v, want ret/a (300) and ret/b (600)", got)
	}
	b.Close()

	// The next broker counts what broker.db holds.
	b, lb = startLogged(t, cfg)
	pub = connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	publish(pub.client, "ret/c", 200) // 910 + 205: refused
	if got := retainedTopics(t, b.URL(), "ret/#"); len(got) != 2 {
		t.Fatalf("after a restart, retained %v, want ret/a and ret/b", got)
	}
	// MQTT 5, QoS 1: PUBACK 0x97.
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var buf bytes.Buffer
	conn := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: "v5"}}
	if err := conn.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}, ProtocolVersion: 5,
		TopicName: "ret/d", PacketID: 7, Payload: bytes.Repeat([]byte{'r'}, 200)}
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for {
		var fh packets.FixedHeader
		first, err := r.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		if err := fh.Decode(first); err != nil {
			t.Fatal(err)
		}
		n, _, err := packets.DecodeLength(r)
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if fh.Type != packets.Puback {
			continue
		}
		fh.Remaining = n
		ack := packets.Packet{FixedHeader: fh, ProtocolVersion: 5}
		if err := ack.PubackDecode(body); err != nil {
			t.Fatal(err)
		}
		if ack.PacketID != 7 || ack.ReasonCode != packets.ErrQuotaExceeded.Code {
			t.Fatalf("PUBACK of a retained publish beyond the bound: id %d, reason 0x%02x; want 7, 0x97", ack.PacketID, ack.ReasonCode)
		}
		break
	}
	// Clearing one makes room.
	publish(pub.client, "ret/a", 0)
	publish(pub.client, "ret/c", 200)
	if got := retainedTopics(t, b.URL(), "ret/#"); len(got) != 2 || got["ret/b"] != 600 || got["ret/c"] != 200 {
		t.Fatalf("retained %v, want ret/b and ret/c", got)
	}
}

// TestConnectionLimit: loopback clients may use every connection; clients
// from the network leave an eighth (at least one) to them.
func TestConnectionLimit(t *testing.T) {
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	lo6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 1}
	lan := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}
	for _, tc := range []struct {
		max    int64
		remote net.Addr
		want   int64
	}{
		{256, lo, 256},
		{256, lo6, 256},
		{256, lan, 224},
		{8, lan, 7},
		{2, lan, 1},
		{1, lan, 1},
	} {
		l := &boundListener{maxConns: tc.max}
		if got := l.limit(tc.remote); got != tc.want {
			t.Errorf("max %d, %s: limit %d, want %d", tc.max, tc.remote, got, tc.want)
		}
	}
}

// TestMaxRetainedExpiry: a retained message that expires (an MQTT 5
// message expiry interval) leaves the bound's count too, though no publish
// removed it.
func TestMaxRetainedExpiry(t *testing.T) {
	b, _ := startLogged(t, Config{MaxRetainedBytes: 1000})
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf bytes.Buffer
	conn := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: "expiring"}}
	if err := conn.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, ProtocolVersion: 5,
		TopicName: "ret/short", Payload: bytes.Repeat([]byte{'r'}, 900), Properties: packets.Properties{MessageExpiryInterval: 1}}
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	retained := func(topic string) bool { _, ok := b.srv.Topics.Retained.Get(topic); return ok }
	wait.For(t, 30*time.Second, "ret/short retained", func() bool { return retained("ret/short") })
	wait.For(t, 30*time.Second, "ret/short expired", func() bool { return !retained("ret/short") })
	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	if pub.err != nil {
		t.Fatal(pub.err)
	}
	if tok := pub.client.Publish("ret/long", 1, true, bytes.Repeat([]byte{'r'}, 900)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	if !retained("ret/long") {
		t.Fatal("a retained message was refused for the bytes of one that had expired")
	}
}

// flakyListener fails its first Accepts with an error that is not
// net.ErrClosed (as EMFILE would), then accepts.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, errors.New("accept: too many open files")
	}
	return l.Listener.Accept()
}

// TestAcceptErrorRetried: an Accept error other than a closed listener is
// logged and retried (mochi's accept loop would stop for good on it).
func TestAcceptErrorRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var lb logbuf.Buffer
	l := &boundListener{Listener: &flakyListener{Listener: ln, fails: 3}, maxConns: 8, timeout: time.Minute, log: zerolog.New(&lb)}
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		got <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Accept did not return after its errors")
	}
	if n := len(lb.Lines("warn", "accept failed; retrying")); n != 3 {
		t.Errorf("%d log lines of a failed accept, want 3", n)
	}
	ln.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed listener: %v, want net.ErrClosed", err)
	}
}

// readPacket reads one MQTT packet: its fixed header and body.
func readPacket(t *testing.T, r *bufio.Reader) (packets.FixedHeader, []byte) {
	t.Helper()
	var fh packets.FixedHeader
	first, err := r.ReadByte()
	if err != nil {
		t.Fatalf("reading a packet: %v", err)
	}
	if err := fh.Decode(first); err != nil {
		t.Fatal(err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		t.Fatal(err)
	}
	fh.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	return fh, body
}

// TestMaxPacketMQTT5: an MQTT 5 client learns the maximum from the CONNACK
// and, sending a larger packet anyway, gets DISCONNECT 0x95 (packet too
// large) before the connection closes.
func TestMaxPacketMQTT5(t *testing.T) {
	b, _ := startLogged(t, Config{MaxPacketBytes: 64 << 10})
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var buf bytes.Buffer
	conn := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: "v5-big", Keepalive: 60}}
	if err := conn.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	fh, body := readPacket(t, r)
	ack := packets.Packet{FixedHeader: fh, ProtocolVersion: 5}
	if err := ack.ConnackDecode(body); err != nil || fh.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK: type %d, reason 0x%02x, %v", fh.Type, ack.ReasonCode, err)
	}
	if ack.Properties.MaximumPacketSize != 64<<10 {
		t.Errorf("CONNACK's Maximum Packet Size %d, want %d", ack.Properties.MaximumPacketSize, 64<<10)
	}
	// A PUBLISH claiming 2 MiB: its header alone is sent.
	topic := "big/v5"
	header := append(append([]byte{0x30}, mqttLength(2+len(topic)+1+2<<20)...), 0, byte(len(topic)))
	if _, err := c.Write(append(header, topic...)); err != nil {
		t.Fatal(err)
	}
	fh, body = readPacket(t, r)
	dis := packets.Packet{FixedHeader: fh, ProtocolVersion: 5}
	if err := dis.DisconnectDecode(body); err != nil || fh.Type != packets.Disconnect || dis.ReasonCode != packets.ErrPacketTooLarge.Code {
		t.Fatalf("after a packet too large: type %d, reason 0x%02x, %v; want DISCONNECT 0x95", fh.Type, dis.ReasonCode, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Error("the connection is still open after the DISCONNECT")
	}
}

// TestCloseWithSilentConnections: the broker's Close does not wait for
// connections that never sent their CONNECT (mochi's Close waited for them:
// until the CONNECT deadline, and for good before there was one), and
// takes connections accepted an instant before it without a data race
// (run with -race).
func TestCloseWithSilentConnections(t *testing.T) {
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", ConnectTimeout: 10 * time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	wait.For(t, 30*time.Second, "5 connections accepted", func() bool { return b.bound.open.Load() == 5 })
	for range 5 { // accepted while Close runs
		go func() {
			if c, err := net.Dial("tcp", b.Addr().String()); err == nil {
				defer c.Close()
				_, _ = c.Read(make([]byte, 1))
			}
		}()
	}
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close waits for connections that sent no CONNECT (their deadline is 10 minutes)")
	}
}
