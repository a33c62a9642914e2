package wire

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Op is a request to the broker waiting for its acknowledgement: a QoS 1
// PUBLISH (its PUBACK), a SUBSCRIBE (its SUBACK) or an UNSUBSCRIBE (its
// UNSUBACK). The connection that sent it ends it with Finish: without an
// error when the acknowledgement came, with one when the connection was
// lost first or the request could not be sent. The agent's task
// connection (transport/mqtt) and the fleet's claims (transport/fleet) use
// it.
type Op struct {
	done chan struct{}
	err  error
	// Filters are a subscription's topic filters, in the packet's order.
	Filters []string
	// Codes are its SUBACK's return codes, set before Finish.
	Codes []byte
}

// NewOp returns an operation not finished yet.
func NewOp() *Op { return &Op{done: make(chan struct{})} }

// Finish ends o with err (nil: acknowledged) and returns it. It is called
// once.
func (o *Op) Finish(err error) *Op {
	o.err = err
	close(o.done)
	return o
}

// Done is closed when o is finished.
func (o *Op) Done() <-chan struct{} { return o.done }

// Err is why o failed, once Done is closed; nil when it was acknowledged.
func (o *Op) Err() error { return o.err }

// Result maps each topic filter of a finished subscription to its SUBACK
// return code (0x80: refused); a filter without a code is left out.
func (o *Op) Result() map[string]byte {
	out := make(map[string]byte, len(o.Filters))
	for i, f := range o.Filters {
		if i < len(o.Codes) {
			out[f] = o.Codes[i]
		}
	}
	return out
}

// Wait waits for o, at most limit, or until ctx ends.
func (o *Op) Wait(ctx context.Context, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-o.done:
		return o.err
	case <-t.C:
		return fmt.Errorf("no answer from the broker within %s", limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WriteTimeout bounds one write on a broker connection: a broker that does
// not read for that long is taken for gone.
const WriteTimeout = 10 * time.Second

// Write writes b on conn, whole, within WriteTimeout, under mu (the
// connection's writers take turns, so packets never interleave); on
// failure it closes conn (its reader then fails, and the connection is
// made again) and returns false.
func Write(mu *sync.Mutex, conn net.Conn, b []byte) bool {
	mu.Lock()
	_ = conn.SetWriteDeadline(time.Now().Add(WriteTimeout))
	_, err := conn.Write(b)
	mu.Unlock()
	if err != nil {
		conn.Close()
		return false
	}
	return true
}
