package broker

import (
	"strconv"
	"strings"

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
type boltHook struct {
	bolt.Hook
}

// OnQosDropped removes a dropped in-flight message from the store, except
// when its client was taken over: mochi v2.7.9 clears the old client's
// in-flight messages after cloning them into the new one, under the same
// keys, and the bolt hook's OnQosDropped deleted them from broker.db, so
// that a broker stopped before the new client acknowledged them lost them
// (TestTakeoverKeepsStoredMessages).
func (h *boltHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	h.Hook.OnQosDropped(cl, pk)
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
		out = append(out, m)
	}
	return out, err
}

// Interface guard.
var _ mqtt.Hook = (*boltHook)(nil)
