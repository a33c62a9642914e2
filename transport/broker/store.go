package broker

import (
	"strconv"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/packets"
)

// boltHook is mochi's bbolt storage hook with one repair. Mochi v2.7.9's
// bolt hook stores an in-flight message without its packet id, and a
// reloaded message without one makes the resend after a restart fail
// ("protocol violation: missing packet id"), dropping the whole session's
// backlog. The id is part of the record's key ("IF_{client}:{id}"), so it
// is recovered from there.
//
// It also carries the acknowledgement gate (gate.go): the copies of a QoS 1
// message that its persistent subscribers acknowledge within the hold are
// never written, the broker's own PUBACK records are never written, and
// $SYS figures are not kept (they start again at each boot), so that the
// store writes only for sessions, subscriptions, retained messages and
// copies a subscriber did not take in time.
type boltHook struct {
	bolt.Hook
	gate *ackGate
}

func newBoltHook(hold time.Duration, prefix string, resultAckDelay time.Duration) *boltHook {
	h := &boltHook{}
	h.gate = newAckGate(hold, func(cl *mqtt.Client, pk packets.Packet) { h.Hook.OnQosPublish(cl, pk, pk.Created, 0) })
	h.gate.lazy, h.gate.lazyDelay = resultsTopic(prefix), resultAckDelay
	return h
}

// resultsTopic returns a function that reports whether a topic is an
// agent's results topic under prefix: {prefix}/{device}/agents/{agent}/results.
func resultsTopic(prefix string) func(string) bool {
	prefix += "/"
	return func(topic string) bool {
		rest, ok := strings.CutPrefix(topic, prefix)
		if !ok {
			return false
		}
		if rest, ok = strings.CutSuffix(rest, "/results"); !ok {
			return false
		}
		device, agent, ok := strings.Cut(rest, "/agents/")
		return ok && device != "" && agent != "" && !strings.ContainsAny(device, "/+#") && !strings.ContainsAny(agent, "/+#")
	}
}

// Provides adds the gate's hooks to mochi's store's.
func (h *boltHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnPublish, mqtt.OnPublished:
		return true
	case mqtt.OnSysInfoTick:
		return false
	}
	return h.Hook.Provides(b)
}

// OnPublish opens a gate for a QoS 1 message.
func (h *boltHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	h.gate.publish(cl, pk)
	return pk, nil
}

// OnPublished seals the gate of a routed message.
func (h *boltHook) OnPublished(cl *mqtt.Client, pk packets.Packet) { h.gate.published(cl, pk) }

// OnQosPublish stores an in-flight packet only when the gate says so.
func (h *boltHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, resends int) {
	if h.gate.qosPublish(cl, pk, resends) {
		h.Hook.OnQosPublish(cl, pk, sent, resends)
	}
}

// OnQosComplete deletes a stored in-flight packet.
func (h *boltHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if h.gate.complete(cl, pk) {
		h.Hook.OnQosComplete(cl, pk)
	}
}

// OnQosDropped deletes a stored in-flight packet that was dropped, except
// when its client was taken over: mochi v2.7.9 clears the old client's
// in-flight messages after cloning them into the new one, under the same
// client id and packet ids. Deleting them removed from broker.db the very
// records the new client holds, so that a broker stopped before the new
// client acknowledged them lost them (TestTakeoverKeepsStoredMessages),
// and would count them acknowledged in the gate.
func (h *boltHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	if h.gate.complete(cl, pk) {
		h.Hook.OnQosDropped(cl, pk)
	}
}

// StoredInflightMessages returns the stored in-flight messages with their
// packet ids.
func (h *boltHook) StoredInflightMessages() ([]storage.Message, error) {
	v, err := h.Hook.StoredInflightMessages()
	out := v[:0]
	for _, m := range v {
		if m.PacketID == 0 {
			if i := strings.LastIndexByte(m.ID, ':'); i >= 0 {
				if n, err := strconv.ParseUint(m.ID[i+1:], 10, 16); err == nil {
					m.PacketID = uint16(n)
				}
			}
		}
		if m.PacketID == 0 {
			h.Log.Warn("dropping a stored in-flight message without a packet id", "key", m.ID, "client", m.Client)
			continue
		}
		h.gate.loaded(m.Client, m.PacketID)
		out = append(out, m)
	}
	return out, err
}

// Interface guard.
var _ mqtt.Hook = (*boltHook)(nil)
