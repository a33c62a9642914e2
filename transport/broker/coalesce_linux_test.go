package broker

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// TestPubackWithResult: an agent acknowledges a task and publishes its
// result in one write; the task's publisher, subscribed to the results,
// gets the task's PUBACK and the result in one write of the broker (one
// data segment on loopback, counted by the kernel: TCP_INFO's
// tcpi_data_segs_in), not in two; and the agent gets its result's PUBACK
// with its next task, in one write, not in two, the last one within
// the delay (made a minute here, so that a slow machine does not send a
// PUBACK alone). The broker runs with one processor, as the daemon does.
func TestPubackWithResult(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const tasks, results = "openstarry/d/agents/a/tasks", "openstarry/d/agents/a/results"
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: log, resultAckDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	login := func(id string, clean bool, filter string) (*net.TCPConn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r, _, err := wire.Login(c, wire.ConnectOptions{ClientID: id, CleanSession: clean, KeepAlive: time.Minute}, 10*time.Second, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(wire.EncodeSubscribe(1, []string{filter}, []byte{1})); err != nil {
			t.Fatal(err)
		}
		expect(t, c, r, wire.Suback)
		return c.(*net.TCPConn), r
	}
	agent, ar := login("agent", false, tasks) // a persistent session: the gate holds the task's PUBACK for it
	pub, pr := login("client", true, results)

	const n = 20
	segs0, agentSegs0 := dataSegsIn(t, pub), dataSegsIn(t, agent)
	acks := 0 // the results' PUBACKs the agent got
	for i := range n {
		if _, err := pub.Write(wire.EncodePublish(tasks, fmt.Appendf(nil, "task %d", i), uint16(i+1), false)); err != nil {
			t.Fatal(err)
		}
		var body []byte
		for body == nil {
			switch typ, b := next(t, agent, ar); typ {
			case wire.Publish:
				body = b
			case wire.Puback:
				acks++
			default:
				t.Fatalf("packet of type %d to the agent", typ)
			}
		}
		task, err := wire.DecodePublish(2, body)
		if err != nil {
			t.Fatal(err)
		}
		// The task's PUBACK and its result, in one write, as the agent's
		// publisher writes them (transport/mqtt, publishLoop).
		out := wire.AppendPuback(nil, task.ID)
		out = wire.AppendPublish(out, results, fmt.Appendf(nil, "result %d", i), 1, uint16(i+1), false, false)
		if _, err := agent.Write(out); err != nil {
			t.Fatal(err)
		}
		expect(t, pub, pr, wire.Puback) // the task's
		res, err := wire.DecodePublish(2, expect(t, pub, pr, wire.Publish))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Write(wire.AppendPuback(nil, res.ID)); err != nil {
			t.Fatal(err)
		}
	}
	// One data segment a task; two (the PUBACK, then the result) when the
	// released PUBACK was written on its own. Slack for a flusher that
	// ran first now and then.
	if got := dataSegsIn(t, pub) - segs0; got > n+n/4 {
		t.Errorf("the publisher received %d data segments for %d tasks: the task's PUBACK and its result were not written together", got, n)
	}
	if got := dataSegsIn(t, agent) - agentSegs0; got > n+n/4 {
		t.Errorf("the agent received %d data segments for %d tasks: its results' PUBACKs were not written with its next tasks", got, n)
	}
	if acks != n-1 {
		t.Errorf("the agent got %d PUBACKs of its results with its next tasks, want %d", acks, n-1)
	}
}

// TestResultPubackAlone: the PUBACK of an agent's result that no task
// follows reaches the agent on its own (after ResultAckDelay).
func TestResultPubackAlone(t *testing.T) {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, _, err := wire.Login(c, wire.ConnectOptions{ClientID: "agent", KeepAlive: time.Minute}, 10*time.Second, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(wire.EncodePublish("openstarry/d/agents/a/results", []byte("result"), 7, false)); err != nil {
		t.Fatal(err)
	}
	if id := expect(t, c, r, wire.Puback); len(id) != 2 || id[1] != 7 {
		t.Fatalf("PUBACK % x, want packet id 7", id)
	}
}

// next reads the next packet from r: its type and body.
func next(t *testing.T, c net.Conn, r *bufio.Reader) (byte, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, _, body, err := wire.ReadPacket(r, nil, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	return typ, body
}

// expect reads the next packet from r and fails unless it is of type typ;
// it returns the packet's body.
func expect(t *testing.T, c net.Conn, r *bufio.Reader, typ byte) []byte {
	t.Helper()
	got, body := next(t, c, r)
	if got != typ {
		t.Fatalf("packet of type %d, want %d", got, typ)
	}
	return body
}

// dataSegsIn is the count of segments with data c received.
func dataSegsIn(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return info.Data_segs_in
}
