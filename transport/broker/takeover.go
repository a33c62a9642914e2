package broker

import (
	"bytes"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// takeoverHook closes the hole through which mochi v2.7.9 loses a QoS 1
// message to a persistent session at the instant its client reconnects.
//
// Server.inheritClientSession marks the old client taken over, clones its
// in-flight messages into the new client, and only afterwards puts the
// new client in the server's client map. A message published in between
// goes to the old client, into in-flight messages that nobody reads again
// (the same hole emqx closed in emqx/emqx#6393). Seen as a result of a
// reconnecting agent that never reached the hub's observer
// (TestTakeoverUnderLoad: 3,000 messages to a subscriber that reconnects
// 500 times lost some in every run).
//
// The hook sees every message that lands in a taken-over client's
// in-flight messages (OnQosPublish) and hands it to the client that took
// the session over, once that one's session is established (its CONNACK
// sent and its in-flight messages resent): with a new packet id, in its
// in-flight messages, stored, and written to it. Until then it waits in
// memory, and in broker.db under the old client's key
// (boltHook.OnQosDropped keeps it), which a restart resends. A message that was
// cloned as well arrives twice, which QoS 1 allows and every consumer
// here deduplicates by task id.
//
// The same hook closes a second hole: mochi numbers the packets a client
// publishes and those it delivers to that client in one map, and deletes
// an unacknowledged delivery when the client publishes under its packet id
// (Server.processPublish), though MQTT numbers the two directions apart.
// An agent that published a result while a task to it was in flight, then
// crashed before acknowledging the task, never got it again
// (TestPacketIDsOfBothDirections). The hook keeps each delivery until it is
// acknowledged and puts back one that a QoS 1 publication removed. (A QoS 2
// publication keeps mochi's own record under the id until PUBREL: not
// handled; the product publishes at QoS 1.)
type takeoverHook struct {
	mqtt.HookBase
	srv   *mqtt.Server
	store *boltHook // nil without persistence

	mu          sync.Mutex
	established map[*mqtt.Client]bool          // sessions whose CONNACK and resends went out
	pending     map[string][]packets.Packet    // client id → messages for the client taking the session over
	sent        map[deliveryKey]packets.Packet // deliveries not acknowledged yet
	restore     map[deliveryKey]packets.Packet // removed by a publication, put back once it is routed
}

// deliveryKey names a delivery in flight to a client.
type deliveryKey struct {
	client string
	id     uint16
}

func newTakeoverHook(srv *mqtt.Server, store *boltHook) *takeoverHook {
	return &takeoverHook{srv: srv, store: store, established: map[*mqtt.Client]bool{}, pending: map[string][]packets.Packet{},
		sent: map[deliveryKey]packets.Packet{}, restore: map[deliveryKey]packets.Packet{}}
}

func (h *takeoverHook) ID() string { return "openstarry-takeover" }

func (h *takeoverHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnQosPublish, mqtt.OnSessionEstablished, mqtt.OnDisconnect,
		mqtt.OnPublish, mqtt.OnPublished, mqtt.OnQosComplete, mqtt.OnQosDropped}, []byte{b})
}

// OnPublish sets aside the delivery that mochi has just deleted because cl
// publishes under its packet id.
func (h *takeoverHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Qos == 1 && !cl.Net.Inline {
		k := deliveryKey{cl.ID, pk.PacketID}
		h.mu.Lock()
		if d, ok := h.sent[k]; ok {
			h.restore[k] = d
		}
		h.mu.Unlock()
	}
	return pk, nil
}

// OnPublished puts the delivery back, once mochi is done with its own
// acknowledgement record under the same id.
func (h *takeoverHook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	k := deliveryKey{cl.ID, pk.PacketID}
	h.mu.Lock()
	d, ok := h.restore[k]
	delete(h.restore, k)
	if ok {
		h.sent[k] = d
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	if _, in := cl.State.Inflight.Get(k.id); !in {
		cl.State.Inflight.Set(d)
	}
	// The client may have reconnected meanwhile (the PUBACK left before
	// the routing): as in deliver, a session already taken over may have
	// been cloned without it.
	if cl.IsTakenOver() {
		h.OnQosPublish(cl, d, 0, 0)
	}
}

// OnQosComplete forgets an acknowledged delivery. (mochi also calls it for
// its own acknowledgement of a publication, with that publication's id:
// OnPublish has then set the delivery under that id aside.)
func (h *takeoverHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	delete(h.sent, deliveryKey{cl.ID, pk.PacketID})
	h.mu.Unlock()
}

// OnQosDropped forgets a dropped delivery, unless its session was taken
// over: the new client holds it under the same id.
func (h *takeoverHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	h.OnQosComplete(cl, pk)
}

// OnSessionEstablished hands the new session what reached the old one
// after the takeover.
func (h *takeoverHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	h.mu.Lock()
	h.established[cl] = true
	out := h.pending[cl.ID]
	delete(h.pending, cl.ID)
	h.mu.Unlock()
	for _, pk := range out {
		h.deliver(cl, pk)
	}
}

func (h *takeoverHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.mu.Lock()
	delete(h.established, cl)
	h.mu.Unlock()
}

// OnQosPublish catches a message that landed in a taken-over client's
// in-flight messages: it goes to the client that took the session over,
// now if that one is established, else when it is.
func (h *takeoverHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, resends int) {
	if pk.FixedHeader.Type != packets.Publish {
		return // mochi's own acknowledgement records
	}
	h.mu.Lock()
	h.sent[deliveryKey{cl.ID, pk.PacketID}] = pk
	h.mu.Unlock()
	if resends != 0 || !cl.IsTakenOver() {
		return
	}
	pk = pk.Copy(false)
	h.mu.Lock()
	succ, ok := h.srv.Clients.Get(cl.ID)
	if !ok || succ == cl || !h.established[succ] {
		h.pending[cl.ID] = append(h.pending[cl.ID], pk)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.deliver(succ, pk)
}

// deliver puts pk in cl's in-flight messages, stores it, and writes it.
// The session took over the old one's subscriptions, unless it began
// clean: then it subscribed to nothing yet and pk is not its.
func (h *takeoverHook) deliver(cl *mqtt.Client, pk packets.Packet) {
	subs := h.srv.Topics.Subscribers(pk.TopicName)
	_, mine := subs.Subscriptions[cl.ID]
	for _, group := range subs.Shared {
		_, in := group[cl.ID]
		mine = mine || in
	}
	if !mine {
		return
	}
	id, err := cl.NextPacketID()
	if err != nil {
		h.srv.Log.Warn("no packet id left for a message to a session taken over", "client", cl.ID, "error", err)
		return
	}
	pk.PacketID = uint16(id)
	pk.FixedHeader.Dup = false
	if !cl.State.Inflight.Set(pk) {
		return
	}
	h.mu.Lock()
	h.sent[deliveryKey{cl.ID, pk.PacketID}] = pk
	h.mu.Unlock()
	if h.store != nil {
		h.store.OnQosPublish(cl, pk, time.Now().Unix(), 0)
	}
	// cl may itself be taken over meanwhile. The flag is set before the
	// in-flight messages are cloned: not set now, the clone is still to
	// come and takes pk along; set, pk may have missed it and goes on.
	if cl.IsTakenOver() {
		h.OnQosPublish(cl, pk, 0, 0)
		return
	}
	_ = cl.WritePacket(pk) // on a closed connection it waits in the in-flight messages for the next
}
