package mqtt

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// recConn records each Write (one element per call).
type recConn struct {
	net.Conn // nil: only Write, SetWriteDeadline and Close are used
	mu       sync.Mutex
	writes   [][]byte
}

func (r *recConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}
func (r *recConn) SetWriteDeadline(time.Time) error { return nil }
func (r *recConn) Close() error                     { return nil }
func (r *recConn) all() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// recRuntime records Confirm.
type recRuntime struct {
	mu        sync.Mutex
	confirmed []uint64
}

func (r *recRuntime) SubmitAsync(context.Context, agent.Event, func(agent.SubmitResult)) {}
func (r *recRuntime) Confirm(seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confirmed = append(r.confirmed, seq)
}
func (r *recRuntime) seqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.confirmed)
}

// connectedClient is a Client whose connection is rec, without a broker.
func connectedClient(t *testing.T) (*Client, *recConn, *recRuntime) {
	t.Helper()
	c, err := New(Config{Broker: "tcp://127.0.0.1:1", Device: "d", Agent: "a", NoFleet: true, NoDeviceStatus: true,
		Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	rec, rt := &recConn{}, &recRuntime{}
	c.rt, c.nc, c.gen, c.started = rt, rec, 1, true
	return c, rec, rt
}

// TestOneWriteForAckReportAndResult: what one save makes ready (a task
// durable, the "done" report of the task before it and its result) leaves
// in one write, in that order: the task's PUBACK, the report (QoS 0), the
// result (QoS 1), so that the broker wakes once for them.
func TestOneWriteForAckReportAndResult(t *testing.T) {
	c, rec, _ := connectedClient(t)
	c.sem <- struct{}{} // the task's place, which settle gives back
	c.acks = []*taken{{m: &inMsg{c: c, topic: c.topics.Tasks, id: 7, qos: 1, gen: 1}}}
	c.Progress("t0", 100, phaseDone)
	c.Deliver([]agent.Result{{Seq: 1, TaskID: "t0", AgentID: "a", Status: agent.ResultDone}})
	c.wg.Add(1)
	go c.publishLoop()
	wait.For(t, 10*time.Second, "a write", func() bool { return len(rec.all()) > 0 })
	c.cancel()
	c.wg.Wait()

	writes := rec.all()
	if len(writes) != 1 {
		t.Fatalf("%d writes, want 1: %q", len(writes), writes)
	}
	r := bytes.NewReader(writes[0])
	typ, _, body, err := wire.ReadPacket(r, nil, 1<<20)
	if err != nil || typ != wire.Puback || !bytes.Equal(body, []byte{0, 7}) {
		t.Fatalf("first packet: type %d %v %v, want the PUBACK of 7", typ, body, err)
	}
	for _, want := range []struct {
		topic string
		qos   byte
	}{{c.topics.Progress, 0}, {c.topics.Results, 1}} {
		typ, flags, body, err := wire.ReadPacket(r, nil, 1<<20)
		if err != nil || typ != wire.Publish {
			t.Fatalf("type %d, %v", typ, err)
		}
		p, err := wire.DecodePublish(flags, body)
		if err != nil || p.Topic != want.topic || p.QoS != want.qos || p.Dup {
			t.Fatalf("%+v %v, want %s at QoS %d", p, err, want.topic, want.qos)
		}
	}
	if r.Len() != 0 {
		t.Fatalf("%d bytes more", r.Len())
	}
}

// TestResultsConfirmedInOrder: a result's PUBACK confirms it only once
// those before it are acknowledged too; a second PUBACK of the same id
// confirms nothing; after a reconnection the results not acknowledged are
// published again with their ids and DUP, and nothing is confirmed by the
// resend itself.
func TestResultsConfirmedInOrder(t *testing.T) {
	c, rec, rt := connectedClient(t)
	c.Deliver([]agent.Result{{Seq: 1, TaskID: "t1"}, {Seq: 2, TaskID: "t2"}, {Seq: 3, TaskID: "t3"}})
	rec.Write(c.appendResults(nil, 1, false))
	ids := make([]uint16, 3)
	for i, p := range c.flight {
		ids[i] = p.id
	}
	c.acked(wire.Puback, ids[1], nil)
	if got := rt.seqs(); len(got) != 0 {
		t.Fatalf("confirmed %v before the first result's PUBACK", got)
	}
	c.acked(wire.Puback, ids[0], nil)
	c.acked(wire.Puback, ids[0], nil) // again: nothing more
	if got := rt.seqs(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("confirmed %v, want [1 2]", got)
	}

	// A new connection: the third result goes out again, same id, DUP.
	c.mu.Lock()
	c.gen, c.resend = 2, true
	c.mu.Unlock()
	r := bytes.NewReader(c.appendResults(nil, 2, false))
	typ, flags, body, err := wire.ReadPacket(r, nil, 1<<20)
	if err != nil || typ != wire.Publish {
		t.Fatalf("type %d, %v", typ, err)
	}
	if p, _ := wire.DecodePublish(flags, body); p.ID != ids[2] || !p.Dup || r.Len() != 0 {
		t.Fatalf("resent %+v (%d bytes more), want id %d with DUP", p, r.Len(), ids[2])
	}
	if got := rt.seqs(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("confirmed %v after the resend, want [1 2]", got)
	}
	c.acked(wire.Puback, ids[2], nil)
	if got := rt.seqs(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("confirmed %v, want [1 2 3]", got)
	}
	if st := c.Stats(); st.Published != 3 || c.waitingN.Load() != 0 {
		t.Fatalf("stats %+v, waiting %d", st, c.waitingN.Load())
	}
}
