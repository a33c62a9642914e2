package main

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// varLength encodes n as MQTT's remaining length.
func varLength(n int) []byte {
	var out []byte
	for {
		b := byte(n % 128)
		if n /= 128; n > 0 {
			b |= 0x80
		}
		if out = append(out, b); n == 0 {
			return out
		}
	}
}

// streamPacket writes a packet header claiming size more bytes (after
// prefix), then up to size bytes of filler, until the peer stops taking
// them; it returns how many it took.
func streamPacket(c net.Conn, header, prefix []byte, size int) int {
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.Write(append(append(header, varLength(len(prefix)+size)...), prefix...)); err != nil {
		return 0
	}
	chunk := make([]byte, 1<<20)
	sent := 0
	for sent < size {
		n, err := c.Write(chunk[:min(len(chunk), size-sent)])
		sent += n
		if err != nil {
			break
		}
	}
	return sent
}

// TestDaemonBrokerBounds is issue #28's measurement on the daemon that runs
// the embedded broker: three unauthenticated 200 MB CONNECTs grew it from
// 18 MB to 996 MB, and an anonymous 100 MB PUBLISH on loopback to 946 MB.
// With the default bounds both are refused as their length is read; the
// daemon's peak resident memory (VmHWM) stays within 64 MiB of what it
// was. A setting of the configuration file reaches the broker:
// mqtt.broker_max_connections 16 refuses the 17th connection.
func TestDaemonBrokerBounds(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc (Linux) to measure the daemon's process")
	}
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, "mqtt:\n  broker_listen: 127.0.0.1:0\n  device: dev1\n  broker_max_connections: 16\n"))
	c.waitLog("embedded broker listening on", 10*time.Second)
	addr := strings.TrimPrefix(embeddedURL(t, c), "tcp://")
	c.waitLog("mqtt: connected to tcp://"+addr, 20*time.Second)
	pid := c.cmd.Process.Pid
	before := statusMiB(t, pid, "VmRSS")

	var wg sync.WaitGroup
	taken := make([]int, 3)
	for i := range taken {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			taken[i] = streamPacket(conn, []byte{0x10}, nil, 200<<20)
		})
	}
	wg.Wait()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	connect := []byte{0x10, 0, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 3, 'b', 'i', 'g'}
	connect[1] = byte(len(connect) - 2)
	if _, err := conn.Write(connect); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(conn, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK % x, %v", ack, err)
	}
	topic := "openstarry/dev1/agents/master/tasks"
	published := streamPacket(conn, []byte{0x30}, append([]byte{0, byte(len(topic))}, topic...), 100<<20)
	conn.Close()

	peak, after := statusMiB(t, pid, "VmHWM"), statusMiB(t, pid, "VmRSS")
	t.Logf("daemon: VmRSS %.1f MiB before, %.1f MiB after, peak VmHWM %.1f MiB; bytes taken of three 200 MB CONNECTs %v, of a 100 MB PUBLISH %d",
		before, after, peak, taken, published)
	if peak-before > 64 {
		t.Errorf("the daemon peaked at %.1f MiB, %.1f MiB above the %.1f MiB it had: the packets were buffered, not refused", peak, peak-before, before)
	}
	c.waitLog("it sent a packet larger than 1048576 bytes (mqtt.broker_max_packet_bytes)", 20*time.Second)

	// mqtt.broker_max_connections from the file: 16 open, the 17th refused.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	refused := func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		conns = append(conns, conn)
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		return !(err != nil && errors.As(err, &ne) && ne.Timeout())
	}
	wait.For(t, 30*time.Second, "a connection refused by mqtt.broker_max_connections 16", refused)
	c.waitLog("connection refused: 16 connections are open", 20*time.Second)
}

// TestRunBrokerBoundsInvalid: `openstarry run`, which starts the embedded
// broker too, refuses a bound that is not positive, naming the key.
func TestRunBrokerBoundsInvalid(t *testing.T) {
	t.Setenv("OPENSTARRY_BROKER_MAX_CONNECTIONS", "0")
	code, _, stderr := exitRun(t, 30*time.Second, "run", "--agent", "b0", "--listen", "", "--data", t.TempDir(),
		"--broker-listen", "127.0.0.1:0", "--broker-max-packet-bytes", "-1")
	if code == 0 || !strings.Contains(stderr, "mqtt.broker_max_connections: must be positive") ||
		!strings.Contains(stderr, "mqtt.broker_max_packet_bytes: must be positive") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
}
